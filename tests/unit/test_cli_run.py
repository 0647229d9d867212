"""`macmesh run`'s hosts as typed become targets."""

from __future__ import annotations

import pytest

from core.cli.run import make_targets
from core.run.cluster_run import ClusterError


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
