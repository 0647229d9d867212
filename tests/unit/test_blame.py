"""Which rank a failed job blames (the cause, never the echo of a peer's loss), and
what its message says."""

from __future__ import annotations

from core.run.job.rank_status import RankStatus, blame_order, exit_message, starting_ranks


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


def test_a_rank_killed_as_memory_runs_out_gets_a_hint_others_do_not() -> None:
    for code, hint in (
        (-9, "its system may have ended it for want of memory"),
        (-11, "MLX crashes this way when memory runs out"),
    ):
        status = RankStatus(1, node="Studio B", exit_code=code, loaded=True, activity="generating")
        message = exit_message(status)
        first, second = message.split("\n")  # the title, then what to try
        assert first == f"Rank 1 on Studio B was killed (signal {-code}) while generating"
        assert hint in second
        assert second.endswith("try a smaller model, a shorter context or more nodes.")
    unnamed = RankStatus(1, exit_code=-1, loaded=True, activity="generating")  # over ssh
    assert exit_message(unnamed) == "Rank 1 was killed while generating"
    terminated = RankStatus(1, exit_code=-15, loaded=True, activity="generating")
    assert exit_message(terminated) == "Rank 1 was killed (signal 15) while generating"


def test_the_one_starting_line_says_how_many_ranks_and_where() -> None:
    """Every front end and the job's state say it the one way (issue 36, item 6)."""
    from core.cli.steps import starting

    assert starting_ranks(1) == "Starting 1 rank…"
    assert starting_ranks(2) == "Starting 2 ranks…"
    assert starting(["mini-a", "mini-b"]) == "Starting 2 ranks on mini-a, mini-b…\n"
