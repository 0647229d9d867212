"""The pure parts of the model check (``core.remote.modelcheck``: reading the node's state,
judging it) and of the copy (``core.remote.modelcopy``: the transfer plan, the progress meter)."""

from __future__ import annotations

import json
import time

import pytest

from core.model.manifest import FileEntry, Manifest
from core.remote import modelcheck as mck
from core.remote import modelcopy as mc

WHOLE = Manifest(
    "Some Model!",
    (FileEntry("config.json", 10, "a" * 64), FileEntry("w.safetensors", 100, "b" * 64)),
)


def test_the_folder_name_is_readable_and_carries_the_model_id() -> None:
    name = mck.folder_name(WHOLE)
    assert name == f"Some_Model-{WHOLE.model_id[:12]}"
    assert mck.folder_name(WHOLE.subset(["config.json"])) == name  # shards share it


def test_parse_state_reads_marker_sizes_and_partials() -> None:
    output = (
        "@@dir\n@@marker\n" + WHOLE.to_json() + "\n@@end\n"
        "have\t10\tconfig.json\npart\t40\tw.safetensors\nodd\t0\tsub dir/x\n"
    )
    state = mck.parse_state(output)
    assert state.folder_exists and mc.Manifest.from_json(state.marker or "") == WHOLE
    assert state.have == {"config.json": 10} and state.partial == {"w.safetensors": 40}
    assert state.odd == ("sub dir/x",)
    assert mck.parse_state("") == mck.RemoteState(False, None)


def test_marker_vouches_sizes_are_checked_and_unvouched_files_are_hashed() -> None:
    marked = mck.RemoteState(True, WHOLE.to_json(), {"config.json": 10, "w.safetensors": 100})
    assert mck.evaluate(WHOLE, marked) == mck.Evaluation(
        ("config.json", "w.safetensors"), (), (), {}
    )
    assert mck.evaluate(WHOLE, marked, verify=True).to_hash == ("config.json", "w.safetensors")
    unmarked = mck.RemoteState(True, None, {"config.json": 10})
    assert mck.evaluate(WHOLE, unmarked) == mck.Evaluation(
        (), ("config.json",), ("w.safetensors",), {}
    )
    short = mck.RemoteState(True, WHOLE.to_json(), {"config.json": 10, "w.safetensors": 99})
    assert "99 bytes instead of 100" in mck.evaluate(WHOLE, short).different["w.safetensors"]


def test_a_marker_of_another_model_or_version_is_different() -> None:
    other = Manifest("Some Model!", (FileEntry("config.json", 10, "c" * 64),))
    state = mck.RemoteState(True, other.to_json(), {"config.json": 10})
    assert "another model" in mck.evaluate(WHOLE, state).different["*"]
    same_model_other_file = Manifest(
        WHOLE.name, (FileEntry("config.json", 10, "c" * 64),), WHOLE.model_id
    )
    state = mck.RemoteState(True, same_model_other_file.to_json(), {"config.json": 10})
    assert "another version" in mck.evaluate(WHOLE, state).different["config.json"]


def test_verdict_reports_hash_mismatches_and_missing_bytes() -> None:
    ev = mck.Evaluation((), ("config.json",), ("w.safetensors",), {})
    bad = mck.verdict("n", "/f", WHOLE, ev, {"config.json": "0" * 64})
    assert bad.status == "different" and "SHA-256 mismatch" in bad.reason
    good = mck.verdict("n", "/f", WHOLE, ev, {"config.json": "a" * 64})
    assert good.status == "missing" and good.missing_bytes == 100


def test_df_lines_give_free_bytes_even_with_spaces_in_names() -> None:
    linux = "/dev/sda1 102400 40960 61440 41% /home/me/.cache"
    assert mck.parse_df(linux) == 61440 * 1024
    mac = "map auto_home 0 0 0 100% /System/Volumes/Data/home"
    assert mck.parse_df(mac) == 0
    spaced = "//me@nas/My Share 2048 1024 1000 51% /Volumes/My Share"
    assert mck.parse_df(spaced) == 1000 * 1024
    assert mck.parse_df("") is None
    assert mck.parse_df("df: /nowhere: No such file or directory") is None


def test_parse_state_reads_free_space_and_mtimes() -> None:
    output = (
        "@@df\ttmpfs 2048 512 1536 25% /c\n"
        "have\t10\tconfig.json\nmtime\t1796287724.060398874\tconfig.json\n"
    )
    state = mck.parse_state(output)
    assert state.free_bytes == 1536 * 1024
    assert state.mtimes == {"config.json": "1796287724.060398874"}
    assert mck.parse_state("@@df\t\n").free_bytes is None  # df said nothing


def _stamped(manifest: Manifest, stats: list) -> str:
    """The marker as COMMIT_SCRIPT writes it: the manifest's JSON plus "stat"."""
    data = json.loads(manifest.to_json())
    return json.dumps(data | {"stat": stats})


def test_a_vouched_file_whose_mtime_changed_is_hashed_as_a_recheck() -> None:
    marker = _stamped(WHOLE, [[10, "100.5"], [100, "200.5"]])
    sizes = {"config.json": 10, "w.safetensors": 100}
    same = mck.RemoteState(
        True, marker, sizes, mtimes={"config.json": "100.5", "w.safetensors": "200.5"}
    )
    assert mck.evaluate(WHOLE, same).ok == ("config.json", "w.safetensors")
    touched = mck.RemoteState(
        True, marker, sizes, mtimes={"config.json": "100.5", "w.safetensors": "999.0"}
    )
    ev = mck.evaluate(WHOLE, touched)
    assert ev.ok == ("config.json",) and ev.to_hash == ev.recheck == ("w.safetensors",)
    verify = mck.evaluate(WHOLE, same, verify=True)
    assert verify.to_hash == verify.recheck == ("config.json", "w.safetensors")
    told = mck.evaluate(WHOLE, same, damaged={"w.safetensors"})
    assert told.missing == ("w.safetensors",) and told.ok == ("config.json",)
    # A marker from before mtimes were recorded, or a broken "stat": sizes only.
    old = mck.RemoteState(True, WHOLE.to_json(), sizes, mtimes={"w.safetensors": "999.0"})
    assert mck.evaluate(WHOLE, old).ok == ("config.json", "w.safetensors")
    assert mck.marker_stats(_stamped(WHOLE, [[10, "1"]]), WHOLE) == {}
    assert mck.marker_stats(_stamped(WHOLE, [["x", "1"], [100, ""]]), WHOLE) == {}
    assert mck.marker_stats('{"stat": ' + "[" * 100_000 + "]" * 100_000 + "}", WHOLE) == {}


def test_a_rechecked_file_that_no_longer_matches_is_damaged_and_copied_again() -> None:
    ev = mck.Evaluation((), ("config.json", "w.safetensors"), (), {}, ("w.safetensors",))
    hashed = {"config.json": "a" * 64, "w.safetensors": "0" * 64}
    state = mck.RemoteState(True, None, partial={"w.safetensors": 40}, free_bytes=50)
    verdict = mck.verdict("studio-b", "/c/models/m", WHOLE, ev, hashed, state)
    assert verdict.status == "missing" and verdict.damaged == ("w.safetensors",)
    assert (
        verdict.missing == ("w.safetensors",) and "changed since MacMesh copied" in verdict.reason
    )
    assert verdict.to_write_bytes == 60 and verdict.short_bytes == 10  # .partial holds 40
    roomy = mck.verdict("n", "/f", WHOLE, ev, hashed, mck.RemoteState(True, None, free_bytes=100))
    assert roomy.short_bytes == 0
    unknown = mck.verdict("n", "/f", WHOLE, ev, hashed, mck.RemoteState(True, None))
    assert unknown.free_bytes is None and unknown.short_bytes == 0
    whole = {"config.json": "a" * 64, "w.safetensors": "b" * 64}
    assert mck.verdict("n", "/f", WHOLE, ev, whole).verified
    partly = mck.Evaluation(("w.safetensors",), ("config.json",), (), {})
    assert not mck.verdict("n", "/f", WHOLE, partly, {"config.json": "a" * 64}).verified


def test_the_meter_gives_no_eta_before_it_has_data_and_ends_at_the_total(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    events: list[mc.CopyProgress] = []
    meter = mc._Meter("n", events.append)
    meter.total, meter.done = 1000, 100
    meter.start()
    assert events[-1].eta_s is None and events[-1].rate is None
    for _ in range(10):
        now[0] += 0.2
        meter.add(50, "w")  # 250 bytes/s
    assert events[-1].rate == pytest.approx(250, rel=0.01)
    assert events[-1].eta_s == pytest.approx((1000 - 600) / events[-1].rate)
    meter.emit("verified", force=True)
    assert events[-1].bytes_done == events[-1].bytes_total == 1000 and events[-1].eta_s == 0
    done = [e.bytes_done for e in events]
    assert done == sorted(done)


THREE = Manifest(
    "Three",
    (
        FileEntry("config.json", 10, "a" * 64),
        FileEntry("a.safetensors", 100, "b" * 64),
        FileEntry("b.safetensors", 50, "c" * 64),
        FileEntry("c.safetensors", 30, "d" * 64),
    ),
)


def _plan(state: mck.RemoteState) -> mc.TransferPlan:
    return mc.plan_transfer(THREE, state, mck.evaluate(THREE, state))


def test_the_transfer_plan_sends_what_is_missing_from_where_it_stopped() -> None:
    # config.json verified in the folder; a: 40 bytes in .partial (resumed); b: complete in
    # .partial (only hashed); c: longer in .partial than it should be (not ours: from 0).
    state = mck.RemoteState(
        True,
        THREE.subset(["config.json"]).to_json(),
        {"config.json": 10},
        {"a.safetensors": 40, "b.safetensors": 50, "c.safetensors": 31},
    )
    plan = _plan(state)
    assert [(e.name, offset) for e, offset in plan.sends] == [
        ("a.safetensors", 40),
        ("b.safetensors", 50),
        ("c.safetensors", 0),
    ]  # manifest order
    assert plan.moved == ("a.safetensors", "b.safetensors", "c.safetensors")
    assert plan.complete == ("b.safetensors",)
    assert plan.reused_bytes == 10 + 50 and plan.resumed_bytes == 40
    assert plan.total_bytes == 180 and plan.done_bytes == 90
    assert plan.commit_needed and {e.name for e in plan.marker.files} == set(THREE.names)
    again = plan.again([e for e in THREE.files if e.name == "a.safetensors"])
    assert [(e.name, offset) for e, offset in again.sends] == [("a.safetensors", 0)]
    assert again.moved == plan.moved and again.marker == plan.marker  # one commit for all


def test_a_marker_keeps_the_files_of_other_shards_and_nothing_sent_may_still_commit() -> None:
    first = THREE.subset(["config.json", "a.safetensors"])
    second = THREE.subset(["config.json", "b.safetensors"])
    state = mck.RemoteState(True, first.to_json(), {"config.json": 10, "a.safetensors": 100})
    plan = mc.plan_transfer(second, state, mck.evaluate(second, state))
    assert [e.name for e, _ in plan.sends] == ["b.safetensors"]
    assert {e.name for e in plan.marker.files} == {"config.json", "a.safetensors", "b.safetensors"}
    everything = mck.RemoteState(True, first.to_json(), {"config.json": 10, "a.safetensors": 100})
    done = mc.plan_transfer(first, everything, mck.evaluate(first, everything))
    assert done.sends == () and not done.commit_needed and done.reused_bytes == 110
    by_hand = mck.RemoteState(True, None, {"config.json": 10, "a.safetensors": 100})
    vouch = mc.plan_transfer(first, by_hand, mck.evaluate(first, by_hand))
    assert vouch.sends == () and vouch.commit_needed and vouch.moved == ()  # the marker only
