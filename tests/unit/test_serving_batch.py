"""The batch is one setting, end to end: the settings (or ``--batch``) give the plan its
batch and prompt cache, the job runs them (the worker's ``--batch`` and
``--prompt-cache-mb``), and the API's server options take the job's batch as the
requests it runs at once (``ServerOptions.for_job``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from core.cli.session import add_serving_arguments, serving_of
from core.run.demo import demo_facts
from core.run.job.launcher import JobSpec
from core.run.planning import Serving, chat_options
from core.run.session import Session, simulated_hosts
from core.serve.server import ServerOptions
from core.settings import Settings, load_settings, save_settings
from core.units import MIB
from core.worker import protocol as p
from core.worker.vocab import Strategy
from tests.helpers.header_models import synthetic_model_info

GIB = 1 << 30


def _session(serving: Serving | None = None) -> Session:
    info = synthetic_model_info(layers=8, layer_bytes=GIB // 8, shared_bytes=GIB // 8)
    return Session(
        info, simulated_hosts(demo_facts(2)), strategy=Strategy.PIPELINE, serving=serving
    )


def test_server_options_run_as_many_requests_at_once_as_the_job_batches() -> None:
    spec = JobSpec(model=Path("/m"), batch=3)
    options = ServerOptions.for_job(spec, "127.0.0.1", 0, max_waiting=5, metrics_without_key=True)
    assert options.max_running == 3
    assert (options.host, options.port, options.max_waiting) == ("127.0.0.1", 0, 5)
    assert options.metrics_without_key
    assert ServerOptions.for_job(JobSpec(model=Path("/m"))).max_running == p.DEFAULT_BATCH


def test_a_sessions_batch_is_planned_run_by_the_ranks_and_served() -> None:
    session = _session(Serving(batch=5, prompt_cache_mb=64))
    plan = session.make_plan()
    assert plan.options.batch == 5 and plan.options.prompt_cache_bytes == 64 * MIB
    spec = session.job_spec()
    assert (spec.batch, spec.prompt_cache_mb) == (5, 64)
    args = spec.worker_args(0)
    assert args[args.index("--batch") + 1] == "5"
    assert args[args.index("--prompt-cache-mb") + 1] == "64"
    assert ServerOptions.for_job(spec).max_running == 5


def test_the_settings_batch_is_the_default_everywhere() -> None:
    """The window's setting (and the CLI's default): nothing picks its own number."""
    default = _session()
    default.make_plan()
    assert default.job_spec().batch == p.DEFAULT_BATCH
    save_settings(load_settings().updated(batch=4, prompt_cache_mb=0))
    session = _session()
    assert session.make_plan().options.batch == 4
    assert session.make_plan().options.prompt_cache_bytes == 0
    spec = session.job_spec()
    assert (spec.batch, spec.prompt_cache_mb) == (4, 0)
    assert ServerOptions.for_job(spec).max_running == 4
    assert chat_options(Strategy.TENSOR).batch == 4  # the window's Model pane plans so


def test_a_bad_batch_in_the_settings_file_falls_back_to_the_default() -> None:
    with pytest.raises(ValueError, match="batch must be a whole number from 1 to 256"):
        Settings().updated(batch=0)
    with pytest.raises(ValueError, match="prompt_cache_mb"):
        Settings().updated(prompt_cache_mb=-1)
    assert Settings().to_json()["batch"] == p.DEFAULT_BATCH


@pytest.mark.parametrize(
    ("argv", "batch", "cache"),
    [
        ([], p.DEFAULT_BATCH, p.DEFAULT_PROMPT_CACHE_MB),
        (["--batch", "2", "--prompt-cache-mb", "0"], 2, 0),
    ],
)
def test_the_command_lines_options_override_the_settings(
    argv: list[str], batch: int, cache: int
) -> None:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    assert serving_of(parser.parse_args(argv)) == Serving(batch, cache)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--batch", "0"], "--batch"),
        (["--batch", "999"], "--batch"),
        (["--prompt-cache-mb", "-1"], "--prompt-cache-mb"),
    ],
)
def test_an_out_of_range_option_is_one_clear_line(argv: list[str], words: str) -> None:
    parser = argparse.ArgumentParser()
    add_serving_arguments(parser)
    with pytest.raises(ValueError, match=words):
        serving_of(parser.parse_args(argv))
