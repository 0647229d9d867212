"""What the served model supports of agents' API features, as the window's API panel
says it: its tool call format (mlx-lm's parser for its template, or none) and whether
answers can be constrained to a JSON schema (structured output, and a forced tool
choice on a model of any template)."""

from __future__ import annotations

from core.serve.tool_calls import ToolFormat

# True once the ranks' sampler enforces ``sampling["json_schema"]`` (issue 34, item 3:
# constrained decoding); the panel and this line say what the cluster does today.
CONSTRAINED_DECODING = True


def features_said(loading: bool, ready: bool, form: ToolFormat | None) -> str:
    """One line: the tool call format and structured output (``loading``: the model's
    tokenizer is being read on this Mac; ``ready``: it was, so its template is known)."""
    if loading:
        return "Tool calls: not known yet (the model's tokenizer is loading)"
    if not ready:
        return "Tool calls: not served (the model's tokenizer is not on this Mac)"
    forced = "required or a named function" + ("" if CONSTRAINED_DECODING else " (unconstrained)")
    if form is None:
        tools = f"Tool calls: no call format in this model's template; {forced} only"
    else:
        tools = f"Tool calls: {form.name} format (auto; {forced})"
    structured = (
        "structured output: JSON schema (constrained decoding)"
        if CONSTRAINED_DECODING
        else "structured output: not served"
    )
    return f"{tools} · {structured}"
