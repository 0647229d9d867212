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


# Qwen2.5's way with tools (its words and markers over the tiny tokenizer's ChatML):
# the tools listed in the system turn, each call as <tool_call>JSON</tool_call>, each
# result as a <tool_response> in a user turn. mlx-lm reads its calls with "json_tools".
TOOLS = (
    "{%- if tools %}"
    "{{ '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] + '\\n\\n' }}{% endif %}"
    "{{ '# Tools\\n\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{% endfor %}"
    "{{ '\\n</tools>\\n\\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' and tools %}"
    "{%- elif message['role'] == 'assistant' and message.tool_calls %}"
    "{{ '<|im_start|>assistant\\n' + message['content'] }}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{% set tool_call = tool_call.function %}{% endif %}"
    '{{ \'<tool_call>\\n{"name": "\' + tool_call.name + \'", "arguments": \' }}'
    "{{ tool_call.arguments | tojson }}{{ '}\\n</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + message['content'] }}"
    "{{ '\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
