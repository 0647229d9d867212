"""The KV cache's bits are one setting end to end (``--kv-bits``, ``--kv-group-size``, the
``kv_bits`` setting): the plan counts the smaller cache and shows the longer context that
fits, the job runs it (the worker's ``--kv-bits``), and a bad value is one clear line."""

from __future__ import annotations

import argparse
import io
import json

import pytest

from core.cli.plan import plan_cli
from core.cli.session import add_serving_arguments, serving_of
from core.plan.kvcontext import context_fits
from core.plan.memory import PlanOptions, kv_bytes_per_layer, prompt_cache_tokens
from core.plan.planner import Node, make_plan
from core.run.demo import demo_facts
from core.run.planning import Serving
from core.run.session import Session, simulated_hosts
from core.settings import Settings, load_settings, save_settings
from core.units import GIB, MIB
from core.worker import kvbits
from core.worker.main import parse_args
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info

MODEL = synthetic_model_info(layers=8, layer_bytes=GIB // 8, shared_bytes=GIB // 8)


def test_the_kv_cache_at_8_and_4_bits_is_counted_smaller() -> None:
    plain = kv_bytes_per_layer(MODEL, PlanOptions(context_length=4096))
    eight = kv_bytes_per_layer(MODEL, PlanOptions(context_length=4096, kv_bits=8))
    four = kv_bytes_per_layer(MODEL, PlanOptions(context_length=4096, kv_bits=4, kv_group_size=32))
    dtype = MODEL.dtype_bytes
    assert eight == round(plain * kvbits.element_bytes(8, 64, dtype) / dtype)
    assert four == round(plain * kvbits.element_bytes(4, 32, dtype) / dtype)
    assert four < eight < plain
    # The prompt cache's bound keeps more tokens (the ranks count it so too).
    bound = PlanOptions(prompt_cache_bytes=256 * MIB)
    assert prompt_cache_tokens(MODEL, PlanOptions(prompt_cache_bytes=256 * MIB, kv_bits=8)) > (
        1.8 * prompt_cache_tokens(MODEL, bound)
    )
    plan = make_plan(MODEL, [Node("a", 64 * GIB)], options=PlanOptions(kv_bits=8))
    assert plan.kv_bytes_per_token < make_plan(MODEL, [Node("a", 64 * GIB)]).kv_bytes_per_token


def test_the_same_macs_fit_a_longer_context_quantized() -> None:
    nodes = [Node("a", 12 * GIB)]
    options = PlanOptions(strategy=Strategy.SINGLE, batch=8, kv_bits=4)
    plan = make_plan(MODEL, nodes, options=options)
    plain, four = context_fits(MODEL, nodes, plan)
    assert (plain.bits, four.bits) == (16, 4)
    assert 0 < plain.tokens < four.tokens
    at = make_plan(MODEL, nodes, options=PlanOptions(batch=8, context_length=plain.tokens))
    assert at.fits
    assert not make_plan(
        MODEL, nodes, options=PlanOptions(batch=8, context_length=plain.tokens + 256)
    ).fits


def test_plan_shows_both_contexts(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.cli import plan as plan_module

    monkeypatch.setattr(plan_module, "resolve_model", lambda _: MODEL)
    out = io.StringIO()
    plan_cli(["m", "--node", "a:12", "--batch", "8", "--kv-bits", "8"], out)
    text = out.getvalue()
    assert "KV cache at 16 bits (as computed): up to" in text
    assert "KV cache at 8 bits (quantized): up to" in text
    out = io.StringIO()
    plan_cli(["m", "--node", "a:12", "--batch", "8", "--kv-bits", "8", "--json"], out)
    fits = json.loads(out.getvalue())["longest_context_by_kv_bits"]
    assert fits["8"] > fits["16"] > 0
    assert plan_cli(["m", "--kv-bits", "5"], io.StringIO()) == 2


def test_a_session_plans_and_runs_the_chosen_bits() -> None:
    session = Session(
        MODEL,
        simulated_hosts(demo_facts(2)),
        strategy=Strategy.PIPELINE,
        serving=Serving(kv_bits=4, kv_group_size=32),
    )
    assert session.make_plan().options.kv_bits == 4
    spec = session.job_spec()
    args = spec.worker_args(1)
    assert args[args.index("--kv-bits") + 1] == "4"
    assert args[args.index("--kv-group-size") + 1] == "32"
    worker = parse_args(["--model", "/m", *args[2:]])
    assert (worker.kv_bits, worker.kv_group_size) == (4, 32)
    plain = Session(MODEL, simulated_hosts(demo_facts(2)), strategy=Strategy.PIPELINE)
    plain.make_plan()
    assert "--kv-bits" not in plain.job_spec().worker_args(0)


def test_the_setting_is_the_default_and_the_options_override_it() -> None:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    assert serving_of(parser.parse_args([])).kv_bits == 16
    save_settings(load_settings().updated(kv_bits=8))
    assert serving_of(parser.parse_args([])).kv_bits == 8
    assert serving_of(parser.parse_args(["--kv-bits", "4"])).kv_bits == 4
    with pytest.raises(ValueError, match="--kv-group-size"):
        serving_of(parser.parse_args(["--kv-group-size", "48"]))
    with pytest.raises(ValueError, match="kv_bits must be one of 16, 8, 4"):
        Settings().updated(kv_bits=2)
    with pytest.raises(SystemExit):
        parse_args(["--model", "/m", "--kv-bits", "6"])
