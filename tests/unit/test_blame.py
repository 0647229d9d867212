"""Which rank a failed job blames: the cause, never the echo of a peer's loss."""

from __future__ import annotations

from core.run.launcher import RankStatus, blame_order


def _exited(rank: int, at: float, code: int, error: str | None = None) -> RankStatus:
    return RankStatus(rank, exit_code=code, exited_at=at, error=error)


def test_a_missing_file_is_blamed_even_when_the_peers_loss_exited_first() -> None:
    cause = _exited(0, 2.0, 1, "Rank 0: model-00002-of-00002.safetensors is missing")
    echo = _exited(1, 1.0, 1, "Rank 1 failed: RuntimeError: [ring] connection to a peer was lost")
    assert min([echo, cause], key=blame_order) is cause


def test_a_killed_rank_comes_first_then_the_earliest_of_its_own() -> None:
    killed = _exited(1, 3.0, -9)
    crash = _exited(0, 1.0, 1, "Rank 0: out of memory")
    assert min([crash, killed], key=blame_order) is killed
    later = _exited(2, 2.0, 1, "Rank 2: out of memory")
    assert min([later, crash], key=blame_order) is crash


def test_an_echo_in_the_log_counts_too() -> None:
    echo = _exited(1, 1.0, 1)
    echo.log.append("RuntimeError: [ring] connection to a peer was lost")
    silent = _exited(0, 2.0, 1)
    assert min([echo, silent], key=blame_order) is silent
