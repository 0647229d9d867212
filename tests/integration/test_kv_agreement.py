"""``--kv-bits 8`` gives the same greedy tokens as the cache as computed ("16-bit") on at
least 95 % of the demo prompts' answer tokens, teacher-forced (issue 37, item 4's "Done
when"): the demo model (float32 on this CPU, OpenBLAS preloaded as a rank runs) reads
each prompt and its 16-bit greedy answer once with each cache, and at each answer
position the 8-bit cache's next-token argmax is the 16-bit cache's
(``tests.benchmarks.kv_agreement``; the free-running figures are reported there and in
docs/kv-cache.md, not bounded: they measure the model's near ties more than the cache).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.kv_agreement import PROMPTS, measure

pytestmark = pytest.mark.slow


def test_kv8_teacher_forced_greedy_tokens_agree_with_16_bit_on_95_pct(demo_model: Path) -> None:
    figures = measure(demo_model, settings=("16", "8", "4"), free=False)
    assert figures["prompts"] == len(PROMPTS)
    assert figures["answer_tokens"] >= 20 * len(PROMPTS)  # no answer cut short by an end token
    # The single pass reads what generating read: its choices are the 16-bit answer itself,
    # and at 8 bits the same as feeding the answer a token at a time.
    assert figures["16_forced_is_its_answer_pct"] == 100.0, figures
    assert figures["8_one_pass_is_stepwise"], figures
    assert figures["8"]["teacher_forced_as_16_pct"] >= 95.0, figures
    # The measure can tell caches apart: 4 bits moves more tokens than 8 bits.
    assert (
        figures["4"]["teacher_forced_differing_positions"]
        > (figures["8"]["teacher_forced_differing_positions"])
    ), figures
