"""A Plan as JSON, as a table, and through ``macmesh plan``."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from core.cli.plan import parse_node, plan_cli
from core.model.info import read_model_info
from core.plan.planner import Node, PlanOptions, make_plan
from core.plan.report import format_plan, plan_to_dict
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


def _uneven_pipeline():
    model = synthetic_model_info(
        layers=60, layer_bytes=4 * GIB, shared_bytes=2 * GIB, name="big-model"
    )
    return make_plan(model, [Node("studio-128", 128 * GIB), Node("studio-256", 256 * GIB)])


def test_plan_to_dict_is_json_and_complete():
    plan = _uneven_pipeline()
    data = json.loads(json.dumps(plan_to_dict(plan)))
    assert (data["strategy"], data["verdict"]) == ("pipeline", "fits")
    assert data["split"] == list(plan.split) and sum(data["split"]) == 60
    assert data["nodes_used"] == ["studio-256", "studio-128"]
    rank0 = data["ranks"][0]
    assert rank0["layer_end"] == 60 and rank0["fits"] is True
    assert rank0["need_bytes"] == plan.ranks[0].need_bytes
    assert rank0["usable_bytes"] == plan.ranks[0].usable_bytes
    budgets = {b["node"]: b for b in data["budgets"]}
    assert budgets["studio-256"]["gpu_limit_bytes"] == 192 * GIB
    assert budgets["studio-256"]["gpu_limit_source"].startswith("macOS default")
    even = data["mlx_even_split"]
    assert even["split"] == [30, 30] and even["fits"] is False
    assert even["worst_node"] == "studio-128" and even["worst_overflow_bytes"] > 0
    assert {a["strategy"] for a in data["alternatives"]} == {"single", "tensor"}
    assert data["options"]["context_length"] == 4096


def test_format_plan_reads_like_a_table():
    plan = _uneven_pipeline()
    text = format_plan(plan)
    lines = text.splitlines()
    assert lines[0] == "big-model: pipeline (fits)"
    assert lines[1] == plan.reason
    header = next(line for line in lines if line.startswith("rank"))
    for column in ("node", "layers", "weights", "KV cache", "activations", "margin", "GPU limit"):
        assert column in header
    first, second = plan.ranks
    assert any(
        line.startswith("0")
        and "studio-256" in line
        and f"{first.layer_start}-59 ({first.layers})" in line
        for line in lines
    )
    assert any(
        line.startswith("1")
        and "studio-128" in line
        and f"0-{second.layer_end - 1} ({second.layers})" in line
        for line in lines
    )
    assert "MLX's even split (30/30) would need" in text and "on studio-128" in text
    assert "studio-256: 256 GB RAM, GPU limit 192 GB (macOS default" in text


def test_format_plan_shows_an_overflow_and_invalid_plans_have_no_table():
    model = synthetic_model_info(layers=8, layer_bytes=8 * GIB, shared_bytes=GIB)
    tight = make_plan(model, [Node("a", 64 * GIB)], options=PlanOptions(strategy="single"))
    assert tight.verdict == "does_not_fit"
    assert "OVER" in format_plan(tight) and "does NOT fit" in format_plan(tight)
    invalid = make_plan(model, [Node("a", 64 * GIB)], options=PlanOptions(strategy="tensor"))
    assert not any(line.startswith("rank") for line in format_plan(invalid).splitlines())
    assert format_plan(invalid).startswith(f"{model.name}: tensor (invalid)")


@pytest.mark.parametrize(
    ("text", "node"),
    [
        ("studio:192", Node("studio", 192 * GIB)),
        ("mini:24:16384", Node("mini", 24 * GIB, wired_limit_mb=16384)),
        ("air:0.5", Node("air", GIB // 2)),
    ],
)
def test_parse_node(text: str, node: Node):
    assert parse_node(text) == node


@pytest.mark.parametrize(
    "text",
    [
        *("studio", ":64", "a:b", "a:64:x", "a:0", "a:-2", "a:1:2:3"),
        *("a:inf", "a:1e400", "a:nan", "a:-inf", "a:99999999", "a:8:-1", "a:8:" + "9" * 5000),
    ],
)
def test_parse_node_rejects(text: str):
    with pytest.raises(ValueError, match=r"NAME:MEM_GB|more than 0") as raised:
        parse_node(text)
    assert len(str(raised.value)) < 200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--context", str(10**30)], "--context must be 1 to"),
        (["--context", "0"], "--context must be 1 to"),
        (["--batch", str(10**9)], "--batch 1 to"),
        (["--margin", "nan"], "--margin must be"),
        (["--margin", "inf"], "--margin must be"),
    ],
)
def test_cli_refuses_absurd_options(
    tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str], message: str
):
    assert plan_cli([str(tiny_models["llama"]), "--node", "a:8", *args]) == 2
    assert message in capsys.readouterr().err


def test_cli_prints_a_table_and_exits_0_when_it_fits(tiny_models: dict[str, Path]):
    out = io.StringIO()
    code = plan_cli(
        [str(tiny_models["llama"]), "--node", "a:8", "--node", "b:8", "--strategy", "pipeline"],
        out=out,
    )
    assert code == 0
    text = out.getvalue()
    assert text.startswith("llama: pipeline (fits)")
    assert "a: 8 GB RAM" in text and "b: 8 GB RAM" in text


def test_cli_json(tiny_models: dict[str, Path]):
    out = io.StringIO()
    code = plan_cli(
        [
            str(tiny_models["qwen3"]),
            "--node",
            "a:16",
            "--node",
            "b:16",
            "--strategy",
            "tensor",
            "--context",
            "1024",
            "--rdma",
            "--json",
        ],
        out=out,
    )
    data = json.loads(out.getvalue())
    assert code == 0 and data["strategy"] == "tensor" and data["verdict"] == "fits"
    assert data["options"]["context_length"] == 1024
    assert "RDMA links carry" in data["reason"]
    info = read_model_info(tiny_models["qwen3"])
    assert data["ranks"][0]["weights_bytes"] == sum(info.layer_bytes) // 2 + info.shared_bytes


def test_cli_exit_1_when_it_does_not_fit(tiny_models: dict[str, Path]):
    out = io.StringIO()
    code = plan_cli([str(tiny_models["llama"]), "--node", "a:0.0001", "--margin", "0"], out=out)
    assert code == 1 and "does NOT fit" in out.getvalue()


def test_cli_without_nodes_plans_for_this_machine(tiny_models: dict[str, Path]):
    out = io.StringIO()
    assert plan_cli([str(tiny_models["llama"]), "--json"], out=out) == 0
    data = json.loads(out.getvalue())
    assert len(data["budgets"]) == 1 and data["budgets"][0]["memory_bytes"] > 0


def test_cli_bad_model_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert plan_cli([str(tmp_path / "nowhere"), "--node", "a:8"]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_cli_bad_node_syntax(tiny_models: dict[str, Path], capsys: pytest.CaptureFixture[str]):
    assert plan_cli([str(tiny_models["llama"]), "--node", "studio=64"]) == 2
    assert "expected NAME:MEM_GB" in capsys.readouterr().err
    assert plan_cli([str(tiny_models["llama"]), "--node", "a:8", "--node", "a:16"]) == 2
    assert "own name" in capsys.readouterr().err


def test_cli_help_says_what_happens_without_nodes(capsys: pytest.CaptureFixture[str]):
    assert plan_cli(["--help"]) == 0
    assert "Without --node the plan is for this machine alone" in capsys.readouterr().out
