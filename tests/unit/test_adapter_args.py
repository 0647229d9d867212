"""The adapter reaches every rank's worker command line, and the worker parses it."""

from __future__ import annotations

from pathlib import Path

from core.run.job.launcher import JobSpec
from core.worker.main import parse_args


def test_every_rank_gets_the_adapter() -> None:
    spec = JobSpec(model=Path("/m"), nodes=2, adapter=Path("/a/mochi"))
    for rank in (0, 1):
        args = spec.worker_args(rank)
        assert args[args.index("--adapter") + 1] == "/a/mochi"
        assert parse_args(args).adapter == "/a/mochi"


def test_each_rank_its_own_folder_when_nodes_differ() -> None:
    spec = JobSpec(
        model=Path("/m"), nodes=2, adapter=Path("/a"), rank_adapters=[Path("/x"), Path("/y")]
    )
    assert [spec.worker_args(r)[-1] for r in (0, 1)] == ["/x", "/y"]


def test_no_adapter_no_flag() -> None:
    spec = JobSpec(model=Path("/m"), nodes=2)
    assert "--adapter" not in spec.worker_args(0)
    assert parse_args(spec.worker_args(0)).adapter is None
