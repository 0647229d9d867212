"""The prompt made on the controller (core.serve.prompts): the ranks' own token ids, a chat
template's refusal as a 400 quoting it (Mistral's alternation rule, Gemma's system rule),
a prompt too long for the context refused by its bytes before any tokenizing, and the
refusals naming ``prompt`` for /v1/completions and ``messages`` for chats."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlx_lm.utils import load_tokenizer

from core.serve.errors import APIError
from core.serve.prompts import PromptMaker
from core.serve.requests import Ask
from core.worker.requests import prompt_tokens
from tests.helpers.templates import GEMMA, GEMMA_RULE, MISTRAL, MISTRAL_RULE, templated

CONTEXT = 2048


@pytest.fixture(scope="module")
def models(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("templated")
    return {
        "mistral": templated(tiny_models["llama"], root / "mistral", MISTRAL),
        "gemma": templated(tiny_models["llama"], root / "gemma", GEMMA),
    }


def _maker(folder: Path) -> PromptMaker:
    maker = PromptMaker(folder, CONTEXT)
    maker.load()
    assert maker.ready
    return maker


def _chat(*turns: tuple[str, str]) -> Ask:
    return Ask(model="m", max_tokens=8, messages=[{"role": r, "content": c} for r, c in turns])


def test_the_ids_are_the_ones_the_ranks_make(models: dict) -> None:
    maker, ranks = _maker(models["mistral"]), load_tokenizer(models["mistral"])
    chat = _chat(("user", "What is the capital of France?"))
    assert maker.tokens(chat) == prompt_tokens(ranks, {"messages": chat.messages})
    raw = Ask(model="m", max_tokens=8, prompt="The capital of France is")
    assert maker.tokens(raw) == prompt_tokens(ranks, {"prompt": raw.prompt, "chat": False})


def test_mistrals_template_refusing_two_user_turns_is_a_400_quoting_it(models: dict) -> None:
    maker = _maker(models["mistral"])
    with pytest.raises(APIError) as refused:
        maker.tokens(_chat(("user", "a"), ("user", "b")))
    assert refused.value.status == 400 and refused.value.param == "messages"
    assert MISTRAL_RULE in refused.value.message and "chat template" in refused.value.message
    assert maker.tokens(_chat(("user", "a"), ("assistant", "b"), ("user", "c")))


def test_gemmas_template_refusing_a_system_message_is_a_400_quoting_it(models: dict) -> None:
    maker = _maker(models["gemma"])
    with pytest.raises(APIError) as refused:
        maker.tokens(_chat(("system", "be brief"), ("user", "hi")))
    assert GEMMA_RULE in refused.value.message and refused.value.status == 400


def test_a_huge_prompt_is_refused_by_its_bytes_before_any_tokenizing_naming_prompt(
    models: dict,
) -> None:
    maker = _maker(models["mistral"])
    huge = Ask(model="m", max_tokens=8, prompt="x" * (8 << 20))

    class Untouchable:
        def __getattr__(self, name: str) -> None:
            raise AssertionError(f"the tokenizer was used ({name})")

    maker._tokenizer = Untouchable()  # the size check alone must refuse it
    with pytest.raises(APIError) as refused:
        maker.tokens(huge)
    assert refused.value.param == "prompt" and refused.value.code == "context_length_exceeded"
    assert "8388608 bytes" in refused.value.message


def test_a_prompt_over_the_context_in_tokens_names_prompt_or_messages(models: dict) -> None:
    maker = _maker(models["mistral"])
    words = "the cat sat " * 1000  # fits the byte bound, not the context in tokens
    with pytest.raises(APIError) as raw:
        maker.tokens(Ask(model="m", max_tokens=8, prompt=words))
    with pytest.raises(APIError) as chat:
        maker.tokens(_chat(("user", words)))
    assert raw.value.param == "prompt" and chat.value.param == "messages"
    assert "tokens; this model's context is 2048." in raw.value.message


def test_without_a_tokenizer_here_the_ranks_make_the_ids(tmp_path: Path) -> None:
    maker = PromptMaker(tmp_path, CONTEXT)  # a folder without a tokenizer
    maker.load()
    assert not maker.ready and maker.tokens(_chat(("user", "hi"))) is None
