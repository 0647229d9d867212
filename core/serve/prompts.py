"""A request's prompt made on the controller: its size checked against the context before
anything is tokenized, the chat template rendered (a template that refuses the messages is
a 400 quoting it, before any rank sees the request), and its token ids, which the ranks
then use as they are (``tokens`` in the generate command): no rank tokenizes inside its
decode step, so one client's long prompt never pauses the others' streams.

The tokenizer is the ranks' own (mlx-lm's ``load_tokenizer`` on the model folder this Mac
holds, the same call ``core.worker.sharding`` makes), so the ids are the ones the ranks
would make. It loads on a thread when the server starts; until it has (or when it cannot:
a model folder without its tokenizer files here), requests go as text and the ranks
tokenize them, refusing one whose template raises on its own.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from core.serve.errors import APIError, bad_request
from core.serve.requests import Ask
from core.serve.tool_calls import ToolFormat, tool_format
from core.serve.tool_prompt import tool_prompt_ids

log = logging.getLogger(__name__)

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


class PromptMaker:
    """The model's tokenizer on the controller (``folder``: the model's folder here)."""

    def __init__(self, folder: Path | None, context: int | None) -> None:
        self.folder, self.context = folder, context
        self._tokenizer: Any = None
        self._bytes_per_token = 0  # the most UTF-8 bytes one token of the vocabulary spells
        self._loaded = threading.Event()
        # One request at a time: a fast tokenizer used from two threads at once can fail
        # ("Already borrowed"); each is bounded by the size check, so none waits long.
        self._using = threading.Lock()

    @property
    def ready(self) -> bool:
        return self._tokenizer is not None

    @property
    def tool_format(self) -> ToolFormat | None:
        """How the model writes tool calls (mlx-lm's parser for it); None: no tools."""
        return tool_format(self._tokenizer)

    def start(self) -> None:
        """Load on a thread (the server accepts requests meanwhile: they go as text)."""
        threading.Thread(target=self.load, name="macmesh-tokenizer", daemon=True).start()

    def load(self) -> None:
        try:
            if self.folder is None:
                return
            from mlx_lm.utils import load_config, load_tokenizer

            config = load_config(self.folder)
            tokenizer = load_tokenizer(self.folder, eos_token_ids=config.get("eos_token_id"))
            vocab = tokenizer._tokenizer.get_vocab()
            longest = max((len(str(piece).encode()) for piece in vocab), default=0)
            self._bytes_per_token = max(1, longest)
            self._tokenizer = tokenizer
        except Exception as error:  # no tokenizer here: the ranks tokenize, as before
            log.info("the API's tokenizer did not load (%s): the ranks tokenize", error)
        finally:
            self._loaded.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Until loading ended (loaded or not); whether it ended."""
        return self._loaded.wait(timeout)

    def check_size(self, ask: Ask) -> None:
        """Refuse (400, in microseconds, nothing tokenized) a prompt whose bytes alone
        cannot fit the context: no token of this vocabulary spells more than
        ``bytes_per_token`` bytes, so more bytes than that times the context are more
        tokens than the context."""
        if self.context is None or not self._bytes_per_token:
            return
        size = _text_bytes(ask)
        most = self.context * self._bytes_per_token
        if size > most:
            raise APIError(
                400,
                f"The {_what(ask)} is {size} bytes: more than this model's context is "
                f"{self.context} tokens can hold (at most {self._bytes_per_token} bytes a "
                f"token, {most} bytes). Shorten it.",
                param=_param(ask),
                code=CONTEXT_LENGTH_EXCEEDED,
            )

    def tokens(self, ask: Ask) -> list[int] | None:
        """The prompt's token ids (None: no tokenizer here, the ranks make them). A 400
        quoting the chat template when it refuses the messages, or naming the prompt's
        length when it does not fit the context. Blocking: call it off the event loop."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return None
        self.check_size(ask)
        try:
            with self._using:
                ids = _ids(tokenizer, ask)
        except APIError:
            raise
        except Exception as error:  # the template's own words (jinja2's TemplateError, ...)
            said = " ".join(str(error).split())[:300] or type(error).__name__
            kind = "chat template" if ask.chat else "tokenizer"
            raise bad_request(
                f"The model's {kind} refused this request: {said}", _param(ask)
            ) from None
        if not ids:
            raise bad_request(
                "The prompt is empty: give the model some text to answer.", _param(ask)
            )
        if self.context is not None and len(ids) >= self.context:
            raise APIError(
                400,
                f"The {_what(ask)} is {len(ids)} tokens; this model's context is {self.context}.",
                param=_param(ask),
                code=CONTEXT_LENGTH_EXCEEDED,
            )
        return ids


def _ids(tokenizer: Any, ask: Ask) -> list[int]:
    """As the ranks make them (``core.worker.serve.prompt_tokens``); with tools, through
    the template's ``tools=`` (``core.serve.tool_prompt``)."""
    if ask.tools is not None:
        return tool_prompt_ids(tokenizer, ask)
    if ask.messages is not None and getattr(tokenizer, "chat_template", None):
        return [
            int(t) for t in tokenizer.apply_chat_template(ask.messages, add_generation_prompt=True)
        ]
    text = ask.prompt or "".join(m.get("content", "") for m in ask.messages or [])
    return [int(t) for t in tokenizer.encode(text)]


def _text_bytes(ask: Ask) -> int:
    """The bytes the prompt is made of at least: its texts, and the tools and calls a
    template renders (their JSON: 8 MB of tools is refused before any tokenizing too)."""
    if ask.messages is not None:
        size = sum(len(m.get("content", "").encode()) for m in ask.messages)
        if ask.tools is not None:
            rendered = [ask.tools.listed, [m.get("tool_calls") or [] for m in ask.messages]]
            size += len(json.dumps(rendered, ensure_ascii=False).encode())
        return size
    return len((ask.prompt or "").encode())


def _what(ask: Ask) -> str:
    return "conversation (messages)" if ask.chat else "prompt"


def _param(ask: Ask) -> str:
    return "messages" if ask.chat else "prompt"
