"""Fuse: base + adapter written as a new model folder (mlx-lm's fuse, as a subprocess),
which the library lists, which loads, and which answers as base + adapter does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core import paths
from core.library.local import list_library
from core.model.info import read_model_info
from core.run.job.launcher import JobSpec
from core.tune.fuse import FuseError, fuse_adapter
from tests.helpers.adapters import mlx_lm_answer
from tests.helpers.jobs import PROMPT, run_job

pytestmark = pytest.mark.slow


def test_the_fused_model_is_listed_and_answers_as_base_plus_adapter(
    tiny_models, tiny_adapter: Path, tmp_path: Path
) -> None:
    expected, _ = mlx_lm_answer(tiny_models["llama"], tiny_adapter, PROMPT)
    assert expected != mlx_lm_answer(tiny_models["llama"], None, PROMPT)[0]
    fused = fuse_adapter(tiny_models["llama"], tiny_adapter)
    assert fused.path == paths.models_dir() / "llama-Mochi"
    assert (fused.base, fused.adapter) == ("llama", "Mochi")
    listed = {e.name: e for e in list_library(hub_cache=tmp_path / "hf", lm_studio=[])}
    assert listed["llama-Mochi"].info is not None  # listed, and valid as a model
    assert listed["llama-Mochi"].path == fused.path
    info = read_model_info(fused.path)
    assert (info.layers, info.hidden_size) == (4, 64)
    # as mlx-lm's base + adapter answers, on one rank and on two (no adapter needed now)
    assert mlx_lm_answer(fused.path, None, PROMPT)[0] == expected
    assert run_job(JobSpec(model=fused.path, strategy="tensor", nodes=2)).tokens == expected
    # a second fuse never overwrites the first
    again = fuse_adapter(tiny_models["llama"], tiny_adapter)
    assert again.path.name == "llama-Mochi-2"


def test_an_adapter_of_another_base_is_refused_before_anything_runs(
    tiny_models, tiny_adapter: Path
) -> None:
    with pytest.raises(FuseError, match=r"^the adapter 'Mochi' was made for llama, not for qwen3"):
        fuse_adapter(tiny_models["qwen3"], tiny_adapter)
    assert list(paths.models_dir().iterdir()) == []


def test_a_stopped_fuse_leaves_no_folder(tiny_models, tiny_adapter: Path) -> None:
    cancel = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fuse_adapter(tiny_models["llama"], tiny_adapter, cancel=cancel)
        except FuseError as exc:
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    cancel.set()  # at once: the subprocess is starting (importing mlx)
    thread.join(60)
    assert not thread.is_alive()
    assert failure and "was stopped; nothing was kept" in str(failure[0])
    assert list(paths.models_dir().iterdir()) == []  # nor a .partial one
