"""Chat templates that refuse some conversations, as real models' do, written into a copy
of a tiny model's ``tokenizer_config.json``: Mistral's alternation rule and Gemma's
system rule (their own ``raise_exception`` calls and words), over the tiny tokenizer's
ChatML tokens."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

MISTRAL_RULE = "Conversation roles must alternate user/assistant/user/assistant/..."
GEMMA_RULE = "System role not supported"

# Mistral-7B-Instruct-v0.2's checks, ChatML's tokens around each turn.
MISTRAL = (
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('" + MISTRAL_RULE + "') }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Gemma's: a system message is refused.
GEMMA = (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('" + GEMMA_RULE + "') }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def templated(model: Path, to: Path, template: str) -> Path:
    """A copy of the model folder ``model`` at ``to`` whose chat template is ``template``."""
    shutil.copytree(model, to)
    config_path = to / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return to
