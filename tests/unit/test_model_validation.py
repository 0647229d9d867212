"""Validation at the edge: every malformed model folder is one ModelError line naming the
file and the field; nothing read from a file can exhaust memory, recurse without end or
reach outside the folder. The corpus is tests/helpers/malformed_models.py."""

from __future__ import annotations

import json
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.model.info import ModelError, read_model_info
from core.model.validate import ModelError as ValidateModelError
from core.model.validate import json_depth, show
from core.plan.memory import GIB, Node, PlanOptions
from core.plan.planner import make_plan
from tests.helpers.malformed_models import (
    CASES,
    FIRST,
    INDEX,
    Case,
    valid_config,
    valid_model,
    write_header,
)

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _one_line_naming(error: ModelError, *names: str) -> str:
    message = str(error)
    assert "\n" not in message and "\r" not in message
    assert len(message) < 600, message
    for name in names:
        assert name in message, (name, message)
    return message


def test_the_corpus_starts_from_a_valid_model(tmp_path: Path) -> None:
    info = read_model_info(valid_model(tmp_path / "m"))
    assert (info.layers, info.heads, info.kv_heads, info.head_dim) == (2, 4, 2, 16)
    assert info.weight_bytes > 0


def test_model_error_is_the_one_class() -> None:
    assert ModelError is ValidateModelError
    assert str(ModelError("a\nb\r\n  c")) == "a b c"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_malformed_folder_is_one_line_naming_the_file_and_field(
    tmp_path: Path, case: Case
) -> None:
    folder = case.build(tmp_path / "m")
    with pytest.raises(ModelError) as raised:
        read_model_info(folder)
    _one_line_naming(raised.value, case.file, case.field)


def test_an_unreadable_config_says_so(tmp_path: Path) -> None:
    folder = valid_model(tmp_path / "m")
    config = folder / "config.json"
    config.chmod(0)
    try:
        if os.access(config, os.R_OK):
            pytest.skip("as root chmod 000 leaves it readable: see the /proc/self/mem test")
        with pytest.raises(ModelError) as raised:
            read_model_info(folder)
        _one_line_naming(raised.value, "config.json", "Permission denied", "permission")
    finally:
        config.chmod(0o644)


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="Linux's /proc/self/mem")
def test_a_config_whose_read_fails_says_so(tmp_path: Path) -> None:
    """A read that fails even for root (the tests run as root here): /proc/self/mem is a
    regular file whose first bytes are unmapped memory, so reading it is an OSError."""
    folder = valid_model(tmp_path / "m")
    (folder / "config.json").unlink()
    (folder / "config.json").symlink_to("/proc/self/mem")
    with pytest.raises(ModelError) as raised:
        read_model_info(folder)
    _one_line_naming(raised.value, "config.json", "cannot read it")


def test_an_unreadable_folder_says_so(tmp_path: Path) -> None:
    folder = valid_model(tmp_path / "m")
    folder.chmod(0)
    try:
        if os.access(folder, os.R_OK | os.X_OK):
            pytest.skip("running as root, chmod 000 leaves the folder readable")
        with pytest.raises(ModelError) as raised:
            read_model_info(folder)
        _one_line_naming(raised.value, str(folder), "Permission denied")
    finally:
        folder.chmod(0o755)


def test_a_weight_file_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    """Without an index the folder is globbed: a FIFO named like weights would block."""
    folder = valid_model(tmp_path / "m")
    (folder / INDEX).unlink()
    for file in folder.glob("*.safetensors"):
        file.unlink()
    os.mkfifo(folder / "model.safetensors")
    with pytest.raises(ModelError, match="no weight files"):
        read_model_info(folder)


def test_a_symlinked_weight_file_is_fine(tmp_path: Path) -> None:
    """Names are confined as text, not resolved: Hugging Face's cache links into blobs."""
    folder = valid_model(tmp_path / "m")
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    (folder / FIRST).rename(blobs / "abc")
    (folder / FIRST).symlink_to(blobs / "abc")
    assert read_model_info(folder).layers == 2


def test_whole_floats_count_as_integers(tmp_path: Path) -> None:
    folder = valid_model(tmp_path / "m")
    config = {**valid_config(), "hidden_size": 64.0, "num_attention_heads": 4.0}
    (folder / "config.json").write_text(json.dumps(config))
    assert read_model_info(folder).hidden_size == 64


def test_json_depth_is_counted_without_recursion() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert json_depth(deep) == 100_001
    assert json_depth({"a": [1, {"b": 2}]}) == 3 and json_depth(5) == 0


def test_show_never_prints_a_huge_value() -> None:
    assert show(10**5000) == "a huge number"
    assert len(show("x" * 10**6)) < 50
    assert show([[[]]]) == "a list" and show(float("inf")) == "inf"


# -- fuzzing: whatever the files say, a ModelInfo the planner can use or one ModelError line

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.sampled_from([0, -1, 1, 2, 10**7, 10**12, 10**100, -(10**100)])
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
CONFIG_KEYS = (
    "model_type",
    "architectures",
    "text_config",
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "torch_dtype",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "quantization",
    "quantization_config",
)


def _check(folder: Path, *names: str) -> None:
    """read_model_info gives a ModelInfo the planner plans with, or one line naming a file."""
    try:
        info = read_model_info(folder)
    except ModelError as error:
        message = _one_line_naming(error)
        assert any(name in message for name in names), (names, message)
        return
    assert all(folder in file.parents for file in info.weight_files)
    for strategy in ("pipeline", "tensor"):
        nodes = [Node("a", 64 * GIB), Node("b", 64 * GIB)]
        make_plan(info, nodes, options=PlanOptions(strategy=strategy))


@FUZZ
@given(
    changes=st.dictionaries(st.sampled_from(CONFIG_KEYS), JSON_VALUES, min_size=1, max_size=3),
    nested=st.booleans(),
)
def test_fuzzed_config(changes: dict, nested: bool) -> None:
    config = valid_config()
    if nested:
        config["text_config"] = changes
    else:
        config.update(changes)
    with tempfile.TemporaryDirectory() as tmp:
        folder = valid_model(Path(tmp) / "m")
        (folder / "config.json").write_text(json.dumps(config))
        _check(folder, "config.json")


@FUZZ
@given(content=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzzed_config_bytes(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = valid_model(Path(tmp) / "m")
        (folder / "config.json").write_bytes(content)
        _check(folder, "config.json")


FILE_NAMES = st.sampled_from(
    [FIRST, "../m/" + FIRST, "/etc/hostname", "../../../../etc/hostname", "", ".", "a/../b"]
) | st.text(max_size=20)


@FUZZ
@given(
    weight_map=JSON_VALUES
    | st.dictionaries(st.text(max_size=10), FILE_NAMES | JSON_SCALARS, max_size=4)
)
def test_fuzzed_index(weight_map: object) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = valid_model(Path(tmp) / "m")
        (folder / INDEX).write_text(json.dumps({"weight_map": weight_map}))
        _check(folder, INDEX, "config.json")


DTYPES = st.sampled_from(["F32", "BF16", "U32", "F4", "Q9", ""]) | JSON_SCALARS
DIMS = st.lists(st.integers(min_value=-2, max_value=2**64) | JSON_SCALARS, max_size=4) | JSON_VALUES


@FUZZ
@given(
    entries=st.dictionaries(
        st.text(max_size=10),
        st.fixed_dictionaries({"dtype": DTYPES, "shape": DIMS, "data_offsets": DIMS}) | JSON_VALUES,
        max_size=3,
    )
)
def test_fuzzed_header(entries: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = valid_model(Path(tmp) / "m")
        write_header(folder / FIRST, entries)
        _check(folder, FIRST, "config.json")


@FUZZ
@given(prefix=st.integers(min_value=0, max_value=2**64 - 1), body=st.binary(max_size=100))
def test_fuzzed_header_bytes(prefix: int, body: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = valid_model(Path(tmp) / "m")
        (folder / FIRST).write_bytes(struct.pack("<Q", prefix) + body)
        _check(folder, FIRST)
