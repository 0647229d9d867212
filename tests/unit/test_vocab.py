"""The shared vocabulary (``core.worker.vocab``): its values on the wire, its logic, and
that the stages which use it speak it (the worker, the launcher, the planner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.run.job.launcher import JobSpec
from core.run.job.rank_status import RankStatus, loading_stage
from core.worker.vocab import Backend, JobState, LoadingStage, Strategy

ROOT = Path(__file__).resolve().parents[2]
# Each is imported by the GUI at the top: importing one must load nothing heavy.
LIGHT = ("core.worker.vocab", "core.worker.protocol", "core.cluster.states", "core.envvars")
HEAVY = ("numpy", "mlx", "mlx_lm", "zeroconf", "paramiko", "psygnal", "psutil", "pyqtgraph")


def test_values_are_the_strings_already_on_the_wire_and_in_files() -> None:
    # settings.json's "strategy", the worker's --backend, the launcher's job states.
    assert [s.value for s in Strategy] == ["auto", "single", "pipeline", "tensor"]
    assert [b.value for b in Backend] == ["auto", "single", "ring", "jaccl", "jaccl-ring"]
    assert {s.value for s in JobState} >= {"starting", "loading", "ready", "stopped", "failed"}
    assert json.dumps({"backend": Backend.JACCL_RING}) == '{"backend": "jaccl-ring"}'
    assert f"{Strategy.PIPELINE}" == "pipeline"


@pytest.mark.parametrize(
    ("backend", "jaccl", "ring"),
    [
        (Backend.AUTO, False, False),
        (Backend.SINGLE, False, False),
        (Backend.RING, False, True),
        (Backend.JACCL, True, False),
        (Backend.JACCL_RING, True, True),
    ],
)
def test_backend_kinds(backend: Backend, jaccl: bool, ring: bool) -> None:
    assert (backend.is_jaccl, backend.is_ring) == (jaccl, ring)


def test_loading_stages_step_in_the_order_a_rank_goes_through_them() -> None:
    assert [s.step for s in LoadingStage] == list(range(len(LoadingStage)))
    order = [
        LoadingStage.STARTING,
        LoadingStage.JOINING,
        LoadingStage.READING,
        LoadingStage.WEIGHTS,
        LoadingStage.SYNCHRONISING,
    ]
    assert [s.step for s in order] == sorted(s.step for s in order)
    for cut in (LoadingStage.SLICING, LoadingStage.PLACING):  # one or the other, never both
        assert LoadingStage.READING.step < cut.step < LoadingStage.WEIGHTS.step


def test_job_state_finished() -> None:
    assert {s for s in JobState if s.finished} == {JobState.STOPPED, JobState.FAILED}


@pytest.mark.parametrize("module", LIGHT)
def test_light_modules_import_nothing_heavy(module: str) -> None:
    code = (
        f"import sys, json; import {module}; "
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_core_package_inits_import_nothing() -> None:
    """A package's __init__ runs before any of its modules: an import there would make
    every light module of the package as heavy as that import."""
    for init in (ROOT / "core").rglob("__init__.py"):
        text = init.read_text()
        assert "import " not in text.replace("from __future__ import annotations", ""), init


# -- the launcher speaks it ------------------------------------------------------------


def test_a_one_rank_job_runs_single_and_the_spec_keeps_the_planned_strategy() -> None:
    spec = JobSpec(model=Path("m"), strategy=Strategy.SINGLE, nodes=1)
    assert spec.strategy is Strategy.SINGLE
    args = spec.worker_args(0)
    assert args[args.index("--strategy") + 1] == "single"
    assert args[args.index("--backend") + 1] == "single"
    # A one-rank spec of another strategy still runs the whole model on its rank.
    legacy = JobSpec(model=Path("m"), strategy="pipeline", nodes=1)
    assert legacy.strategy is Strategy.PIPELINE and legacy.rank_strategy is Strategy.SINGLE


def test_a_job_spec_takes_strings_and_refuses_what_cannot_run() -> None:
    spec = JobSpec(model=Path("m"), strategy="tensor", nodes=3, backend="jaccl-ring")
    assert spec.strategy is Strategy.TENSOR and spec.rank_backend is Backend.JACCL_RING
    with pytest.raises(ValueError, match="one node"):
        JobSpec(model=Path("m"), strategy=Strategy.SINGLE, nodes=2)
    with pytest.raises(ValueError, match="auto"):
        JobSpec(model=Path("m"), strategy=Strategy.AUTO)
    with pytest.raises(ValueError, match="auto"):
        JobSpec(model=Path("m"), backend=Backend.AUTO)
    with pytest.raises(ValueError):
        JobSpec(model=Path("m"), backend="infiniband")


def test_the_launcher_follows_a_rank_by_stage_and_says_it_in_words() -> None:
    status = RankStatus(0)
    assert status.stage is LoadingStage.STARTING and status.doing == "starting"
    status.stage = loading_stage("weights", status.stage)
    assert status.stage is LoadingStage.WEIGHTS and status.doing == "loading weights"
    assert loading_stage("a stage of a newer worker", status.stage) is LoadingStage.WEIGHTS
    assert loading_stage(None, status.stage) is LoadingStage.WEIGHTS
    status.loaded = True
    assert status.doing == "loaded"
    for stage in LoadingStage:  # every stage has words of its own, not its wire value
        assert RankStatus(0, stage=stage).doing


# -- the worker speaks it ---------------------------------------------------------------


class _Group:
    """What ``load_shard`` asks of a group before any collective runs."""

    def __init__(self, size: int, rank: int = 0) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


@pytest.mark.parametrize(
    ("strategy", "size", "expected"),
    [
        (Strategy.SINGLE, 1, [LoadingStage.READING, LoadingStage.WEIGHTS]),
        ("pipeline", 2, [LoadingStage.READING, LoadingStage.PLACING, LoadingStage.WEIGHTS]),
    ],
)
def test_the_worker_reports_loading_stages_as_vocabulary(
    tiny_models: dict[str, Path], strategy: str, size: int, expected: list[LoadingStage]
) -> None:
    from core.worker.sharding import load_shard

    heard: list[object] = []
    shard = load_shard(tiny_models["llama"], _Group(size), strategy, progress=heard.append)
    assert heard == expected and all(type(s) is LoadingStage for s in heard)
    assert [s.step for s in heard] == sorted(s.step for s in heard)
    assert shard.strategy is Strategy(strategy)


def test_the_worker_refuses_single_on_a_group_and_auto_anywhere(
    tiny_models: dict[str, Path],
) -> None:
    from core.worker.sharding import ShardError, load_shard

    with pytest.raises(ShardError, match="one node"):
        load_shard(tiny_models["llama"], _Group(2), Strategy.SINGLE)
    with pytest.raises(ShardError, match="unknown strategy 'auto'"):
        load_shard(tiny_models["llama"], _Group(1), "auto")


def test_the_worker_command_line_takes_the_vocabulary() -> None:
    from core.worker.main import parse_args

    args = parse_args(["--model", "m", "--strategy", "single", "--backend", "jaccl-ring"])
    assert args.strategy is Strategy.SINGLE and args.backend is Backend.JACCL_RING
    with pytest.raises(SystemExit):
        parse_args(["--model", "m", "--strategy", "auto"])
