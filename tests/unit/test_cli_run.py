"""`macmesh run`'s hosts as typed become targets; its flags reach the session."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

from core.cli import run as cli_run
from core.cli import session as cli_session
from core.cli.session import make_targets
from core.run.errors import ClusterError
from core.run.session import Session
from tests.helpers.tiny_models import make_tiny_model


def test_hosts_as_typed_become_targets_with_their_own_cache_folder() -> None:
    targets = make_targets(["me@10.0.0.2:2222", "studio-b.local"], "/opt/py", "/tmp/c/{host}")
    assert [(t.name, t.host, t.port, t.user) for t in targets] == [
        ("me@10.0.0.2:2222", "10.0.0.2", 2222, "me"),
        ("studio-b.local", "studio-b.local", 22, None),
    ]
    assert [t.cache_root for t in targets] == ["/tmp/c/me@10.0.0.2:2222", "/tmp/c/studio-b.local"]
    assert {t.interpreter for t in targets} == {"/opt/py"}
    with pytest.raises(ClusterError, match="twice"):
        make_targets(["a", "a"])
    with pytest.raises(ValueError):
        make_targets(["bad host!"])


def test_verify_reaches_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`macmesh run --verify`: the session's checks hash every model file on the nodes."""
    made: list[dict[str, object]] = []

    class Stop(Session):
        def __init__(self, *args: object, **kwargs: object) -> None:
            made.append(kwargs)
            raise ClusterError("stopped here")

    monkeypatch.setattr(cli_session, "Session", Stop)
    model = make_tiny_model(tmp_path / "tiny", layers=2)
    parser = argparse.ArgumentParser()
    cli_run.add_arguments(parser)
    err = io.StringIO()
    for flags, wanted in (([], False), (["--verify"], True)):
        args = parser.parse_args([str(model), "--hosts", "a", *flags])
        assert cli_run.run(args, io.StringIO(), err) == 2
        assert made.pop()["verify"] is wanted
    assert "macmesh: stopped here" in err.getvalue()
