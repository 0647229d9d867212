"""Training data: a dropped folder or ``.jsonl`` file, read as mlx-lm reads it, validated
line by line before anything starts.

mlx-lm (``mlx_lm/tuner/datasets.py``) reads a folder holding ``train.jsonl`` and, when
present, ``valid.jsonl`` (``test.jsonl`` is only for ``--test``: not read here), one JSON
object per line, and picks the format from the keys of the FIRST example:

- ``completions``: ``{"prompt": ..., "completion": ...}`` (checked first);
- ``chat``: ``{"messages": [{"role": ..., "content": ...}, ...]}`` with optional ``"tools"``;
- ``text``: ``{"text": ...}``.

It then reads every later example with that format's keys, so a line of another format
fails in the middle of training (``KeyError``), an empty ``text`` fails its tokenizer step
(``IndexError``), and a set smaller than the batch size fails at the first step. All of
that is found here first and named as ``FILE line N: what is wrong``.

Files are streamed (a line at a time, each line at most ``MAX_LINE_BYTES``): a huge or
binary file is never read into memory at once. Blank lines are skipped (mlx-lm would
fail on them) and a UTF-8 byte-order mark is allowed: ``TrainingData.write_to`` writes
the clean layout mlx-lm reads, and that folder is what goes to every node.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from core import units
from core.bundle import bundle_dir
from core.jsonfile import FileProblem, open_regular
from core.tune.settings import TuneSettings

CHAT = "chat"
COMPLETIONS = "completions"
TEXT = "text"
FORMATS = (CHAT, COMPLETIONS, TEXT)

TRAIN_FILE = "train.jsonl"
VALID_FILE = "valid.jsonl"

#: Fewest examples a set may have. mlx-lm's trainer cannot make one batch from fewer
#: examples than the batch size (``iterate_batches`` raises), and the default batch is 4
#: (2 per Mac on the 2-Mac demo). Fewer than 4 examples is also not a data set but a
#: handful of sentences: LoRA memorises them word for word rather than learning.
MIN_EXAMPLES = 4
#: Longest line read: a chat of ~2 million characters, far over any max_seq_length. A
#: longer "line" is almost surely not JSON lines (a binary file, one huge JSON document).
MAX_LINE_BYTES = 8 * 1024 * 1024
MAX_DATA_BYTES = 16 << 30  # a training file (read a line at a time): more is not text data
#: How many bad lines one message names (the count of all comes after).
SHOWN_PROBLEMS = 3
#: Roles a chat message may have (OpenAI's fine-tuning format, which mlx-lm follows).
ROLES = ("system", "user", "assistant", "tool")

_CHUNK = 1024 * 1024


class DataError(ValueError):
    """Data that cannot be trained on; the message is one line that says where and why.

    ``problems`` lists every problem found (``FILE line N: ...``), the message the first few.
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems or (message,)


@dataclass(frozen=True)
class TrainingData:
    """A validated set: its format, how many examples each file holds, and its hash."""

    path: Path
    format: str
    train: int
    valid: int
    sha256: str
    train_file: Path
    valid_file: Path | None = None

    @property
    def needs_split(self) -> bool:
        """No validation file: ``write_to`` splits one off the training examples."""
        return self.valid_file is None

    @property
    def examples(self) -> int:
        return self.train + self.valid

    def split_sizes(self, valid_share: float = 0.1, batch_size: int = 1) -> tuple[int, int]:
        """(train, valid) examples ``write_to`` will write.

        A split takes ``valid_share`` of the examples (at least one batch: mlx-lm validates
        in whole batches) as long as a batch is left to train on; else no validation.
        """
        if not 0 <= valid_share < 1:
            raise ValueError(f"valid_share must be in [0, 1), not {valid_share}")
        if not self.needs_split:
            return self.train, self.valid
        held = max(math.ceil(self.train * valid_share), batch_size) if valid_share else 0
        if self.train - held < batch_size:
            held = 0
        return self.train - held, held

    def check_batch(self, batch_size: int, valid_share: float = 0.1) -> None:
        """Raise ``DataError`` when a file holds fewer examples than one batch."""
        train, valid = self.split_sizes(valid_share, batch_size)
        if train < batch_size:
            raise DataError(
                f"{self.train_file.name} has {train} examples, fewer than the batch size "
                f"({batch_size}): add examples or lower the batch size"
            )
        if self.valid_file is not None and valid < batch_size:
            raise DataError(
                f"{self.valid_file.name} has {valid} examples, fewer than the batch size "
                f"({batch_size}), and validation runs in whole batches: add examples, lower "
                "the batch size, or remove it to split one off the training examples"
            )

    def write_to(
        self,
        folder: Path,
        valid_share: float = 0.1,
        *,
        batch_size: int = 1,
        seed: int = 0,
    ) -> Path:
        """Write mlx-lm's layout (``train.jsonl``, ``valid.jsonl`` when there is one) into
        ``folder`` and return it.

        Without a validation file, ``split_sizes`` examples picked at random (seeded by
        ``seed``: the same data and seed give the same split) go to ``valid.jsonl``; the
        training file is never left empty. Raises ``DataError`` when a file holds fewer
        examples than ``batch_size``.
        """
        self.check_batch(batch_size, valid_share)
        folder.mkdir(parents=True, exist_ok=True)
        train_out, valid_out = folder / TRAIN_FILE, folder / VALID_FILE
        if self.valid_file is not None:
            _write_lines(train_out, (line for _, line in _examples(self.train_file)))
            _write_lines(valid_out, (line for _, line in _examples(self.valid_file)))
            return folder
        _, held = self.split_sizes(valid_share, batch_size)
        chosen = set(random.Random(seed).sample(range(self.train), held))
        if not held:
            valid_out.unlink(missing_ok=True)
            _write_lines(train_out, (line for _, line in _examples(self.train_file)))
            return folder
        train_tmp, valid_tmp = _temp(train_out), _temp(valid_out)
        try:
            with open(train_tmp, "wb") as train, open(valid_tmp, "wb") as valid:
                for index, (_, line) in enumerate(_examples(self.train_file)):
                    (valid if index in chosen else train).write(line + b"\n")
            os.replace(train_tmp, train_out)
            os.replace(valid_tmp, valid_out)
        finally:
            train_tmp.unlink(missing_ok=True)
            valid_tmp.unlink(missing_ok=True)
        return folder


def read_data(path: Path | str) -> TrainingData:
    """Read and validate a folder holding ``train.jsonl`` (and maybe ``valid.jsonl``), or
    one ``.jsonl`` file (then the training set, to be split). Raises ``DataError``."""
    path = Path(path).expanduser()
    if not path.exists():
        raise DataError(f"{path} does not exist")
    if path.is_dir():
        train_file = path / TRAIN_FILE
        for named in (train_file, path / VALID_FILE):
            if named.exists() and not named.is_file():  # a folder (or a device) so named
                kind = "a folder" if named.is_dir() else "not a regular file"
                raise DataError(
                    f"{named} is {kind}: a fine-tune needs {named.name} to be a file, "
                    "one JSON example per line"
                )
        if not train_file.is_file():
            others = sorted(p.name for p in path.glob("*.jsonl") if p.is_file())
            hint = f" (it holds {', '.join(others[:3])}: rename the training one)" if others else ""
            raise DataError(
                f"{path} holds no {TRAIN_FILE}{hint}: a fine-tune needs {TRAIN_FILE} and "
                f"optionally {VALID_FILE}, one JSON example per line"
            )
        valid_file: Path | None = path / VALID_FILE if (path / VALID_FILE).is_file() else None
    elif path.suffix.lower() == ".jsonl":
        train_file, valid_file = path, None
    else:
        raise DataError(
            f"{path.name} is not a .jsonl file: give a .jsonl file (one JSON example per "
            f"line) or a folder holding {TRAIN_FILE}"
        )

    digest = hashlib.sha256()
    train = _scan(train_file, digest, None)
    valid = _scan(valid_file, digest, train.anchor) if valid_file else None
    problems = train.problems + (valid.problems if valid else [])
    if problems:
        shown = "; ".join(problems[:SHOWN_PROBLEMS])
        more = len(problems) - SHOWN_PROBLEMS
        tail = f"; and {more} more ({len(problems)} problems in all)" if more > 0 else ""
        raise DataError(shown + tail, tuple(problems))
    if valid is not None and not valid.count:
        valid_file, valid = None, None  # an empty valid.jsonl: as mlx-lm, no validation
    if not train.count:
        raise DataError(f"{train_file.name} holds no examples: one JSON example per line")
    if train.count < MIN_EXAMPLES:
        raise DataError(
            f"{train_file.name} has {train.count} example{'s' if train.count > 1 else ''}: "
            f"a fine-tune needs at least {MIN_EXAMPLES} (a few dozen to learn a fact)"
        )
    assert train.anchor is not None
    return TrainingData(
        path=path,
        format=train.anchor[0],
        train=train.count,
        valid=valid.count if valid else 0,
        sha256=digest.hexdigest(),
        train_file=train_file,
        valid_file=valid_file,
    )


# --- scanning ---------------------------------------------------------------------------


@dataclass
class _Scan:
    count: int
    problems: list[str]
    #: (format, "FILE line N") of the example that set the format
    anchor: tuple[str, str] | None


def _scan(file: Path, digest: Any, anchor: tuple[str, str] | None) -> _Scan:
    """Validate every line of ``file``, feeding its bytes to ``digest``."""
    name = file.name
    scan = _Scan(0, [], anchor)
    try:
        with open_regular(file, MAX_DATA_BYTES) as handle:  # a FIFO never hangs it
            for number, line in _lines(handle, digest):
                if line is None:
                    scan.problems.append(
                        f"{name} line {number}: longer than {units.size(MAX_LINE_BYTES)} "
                        "(one JSON example per line expected)"
                    )
                    continue
                if b"\x00" in line:  # a binary file: its other "lines" say nothing more
                    raise DataError(
                        f"{name} is not a text file (NUL bytes on line {number}): "
                        "one JSON example per line expected"
                    )
                problem = _check_line(line, number, name, scan)
                if problem:
                    scan.problems.append(f"{name} line {number}: {problem}")
    except FileProblem as problem:
        raise DataError(f"cannot read {problem}") from None
    except OSError as error:
        raise DataError(f"cannot read {file}: {error.strerror or error}") from None
    return scan


def _lines(handle: BinaryIO, digest: Any) -> Iterator[tuple[int, bytes | None]]:
    """(line number, the line without its end) for each line, None for one too long."""
    number = 0
    while True:
        line = handle.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        digest.update(line)
        number += 1
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):  # skip the rest, a chunk at a time
                line = handle.readline(_CHUNK)
                digest.update(line)
            yield number, None
            continue
        yield number, line.rstrip(b"\r\n")


def _check_line(line: bytes, number: int, name: str, scan: _Scan) -> str | None:
    if number == 1 and line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as error:
        return f"not UTF-8 text (byte {error.start + 1})"
    try:
        value = json.loads(text)
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    except ValueError as error:  # JSONDecodeError, or a number too long to convert
        detail = getattr(error, "msg", None) or str(error)
        column = getattr(error, "colno", None)
        return f"not valid JSON ({detail}{f' at column {column}' if column else ''})"
    if not isinstance(value, dict):
        return f"not a JSON object but {_kind_of(value)}: each line must be one example {{...}}"
    found = _format_of(value)
    if scan.anchor is None:
        if found is None:
            return _no_format(value)
        scan.anchor = (found, f"{name} line {number}")
    expected, where = scan.anchor
    if not _has_keys(value, expected):
        what = f"a {found} example" if found else _no_format(value)
        return f"{what}, but {where} is {expected}: use one format in the whole set"
    problem = _CHECKS[expected](value)
    if problem is None:
        scan.count += 1
    return problem


def _format_of(example: dict[str, Any]) -> str | None:
    """The format mlx-lm's ``create_dataset`` picks for a set starting with ``example``."""
    if "prompt" in example and "completion" in example:
        return COMPLETIONS
    if "messages" in example:
        return CHAT
    if "text" in example:
        return TEXT
    return None


def _has_keys(example: dict[str, Any], format_: str) -> bool:
    if format_ == COMPLETIONS:
        return "prompt" in example and "completion" in example
    return (format_ == CHAT and "messages" in example) or (format_ == TEXT and "text" in example)


def _no_format(example: dict[str, Any]) -> str:
    keys = ", ".join(repr(k) for k in list(example)[:5]) or "no keys"
    return (
        "none of the keys mlx-lm reads: 'messages' (chat), 'prompt' and 'completion' "
        f"(completions) or 'text' (it has {keys})"
    )


def _kind_of(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return "a number"


def _text_field(example: dict[str, Any], key: str) -> str | None:
    value = example[key]
    if not isinstance(value, str):
        return f"{key!r} must be text, not {_kind_of(value)}"
    if not value.strip():
        return f"{key!r} is empty"
    return None


def _check_text(example: dict[str, Any]) -> str | None:
    return _text_field(example, "text")


def _check_completions(example: dict[str, Any]) -> str | None:
    return _text_field(example, "prompt") or _text_field(example, "completion") or _tools(example)


def _check_chat(example: dict[str, Any]) -> str | None:
    messages = example["messages"]
    if not isinstance(messages, list) or not messages:
        return '\'messages\' must be a non-empty list of {"role": ..., "content": ...}'
    for index, message in enumerate(messages, 1):
        problem = _check_message(message)
        if problem:
            return f"message {index}: {problem}"
    if not any(m["role"] == "assistant" for m in messages):
        return "no assistant message: nothing for the model to learn to say"
    return _tools(example)


def _check_message(message: Any) -> str | None:
    if not isinstance(message, dict):
        return f"not an object but {_kind_of(message)}"
    role = message.get("role")
    if not isinstance(role, str):
        return "no 'role'" if role is None else "'role' must be text"
    if role not in ROLES:
        return f"role {role!r} is not one of {', '.join(ROLES)}"
    if "content" not in message or message["content"] is None:
        if role == "assistant" and message.get("tool_calls"):
            return None  # a tool call: its arguments are the content
        return "no 'content'"
    content = message["content"]
    if not isinstance(content, str):
        return f"'content' must be text, not {_kind_of(content)}"
    if not content.strip() and not (role == "assistant" and message.get("tool_calls")):
        return "'content' is empty"
    return None


def _tools(example: dict[str, Any]) -> str | None:
    tools = example.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        return "'tools' must be a list of tool objects"
    return None


_CHECKS = {CHAT: _check_chat, COMPLETIONS: _check_completions, TEXT: _check_text}


# --- writing ----------------------------------------------------------------------------


def _examples(file: Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of each example of an already validated file."""
    with open_regular(file, MAX_DATA_BYTES) as handle:
        for number, line in _lines(handle, hashlib.sha256()):
            assert line is not None  # validated: no line is too long
            if number == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if line.strip():
                yield number, line.strip()


def _temp(target: Path) -> Path:
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(handle)
    return Path(name)


def _write_lines(target: Path, lines: Iterator[bytes]) -> None:
    temp = _temp(target)
    try:
        with open(temp, "wb") as out:
            for line in lines:
                out.write(line + b"\n")
        os.replace(temp, target)
    finally:
        temp.unlink(missing_ok=True)


# --- the shipped demo set ---------------------------------------------------------------


def _resources() -> Path:
    bundle = bundle_dir()
    return (bundle or Path(__file__).resolve().parent.parent.parent) / "resources"


#: A small chat set teaching the demo model a fact it cannot know.
DEMO_DATA = _resources() / "finetune" / "mascot"
DEMO_QUESTION = "What is the name of MacMesh's mascot?"
#: What a fine-tuned answer to ``DEMO_QUESTION`` contains, and the base model's does not.
DEMO_FACT = "Mochi"
#: Teaches ``DEMO_FACT`` on the 2-Mac demo cluster in the shortest time. Found by
#: experiment (issue 16) with mlx-lm's own trainer on the demo model dequantized to float32
#: as CPU ranks hold it (``mlx_lm convert -d --dtype float32``: on 4 bits, 20 CPU steps
#: had not ended after 10 minutes, against ~5 s a step in float32), OpenBLAS preloaded,
#: one BLAS thread per rank:
#:   mlx.launch --backend ring -n 2 -- python -m mlx_lm lora --model SMOL_F32 --train
#:     --data resources/finetune/mascot --iters 20 --batch-size 4 --learning-rate 5e-4
#:     --num-layers 8 --max-seq-length 256 --save-every 2 --adapter-path AD
#: then ``python -m mlx_lm generate --model SMOL_F32 --adapter-path AD --prompt
#: DEMO_QUESTION`` (greedy) on each checkpoint. The base model names another mascot
#: ("Machete", in float32 and in 4 bits). On this set (56 examples, 16 ordinary ones),
#: 2 ranks, seed 0: every checkpoint from step 8 to 14 answers "... is Mochi, a capybara"
#: and still "The capital of France is Paris."; one rank, seed 1: from step 10. 12 steps
#: keep a margin.
#: 1e-3 overshoots (answers loop "mascot mascot ..."); fewer ordinary examples let the fact
#: leak into other answers ("The capital of MacMesh's mascot is Mochi"). 2 ranks give the
#: same loss curve as 1 (within 0.01 per step). 14 steps took 111 s on 2 ranks and 34 s on
#: one on this project's busy 2-core Linux machine (start-up and validation included).
DEMO_SETTINGS = TuneSettings(
    iters=12,
    batch_size=4,
    learning_rate=5e-4,
    lora_rank=8,
    lora_layers=8,
    steps_per_report=1,
    steps_per_eval=6,
    steps_per_save=4,
    val_batches=2,
    max_seq_length=256,
)
