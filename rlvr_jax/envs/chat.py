"""A chat model's glue around a tool result, read once from its tokenizer's chat template:
the text between the end of the assistant's call and the tool's output, and between the
output and the next assistant turn. Qwen2.5 (and Hermes-style templates) give

    prefix  <|im_end|>\\n<|im_start|>user\\n<tool_response>\\n
    suffix  \\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n

so an episode's ids are those of the conversation the template would render, with the
sampled ids kept verbatim (tests/test_chat_glue.py checks it against apply_chat_template)."""

from __future__ import annotations

_CALL, _OUTPUT = "\x1eCALL\x1e", "\x1eOUTPUT\x1e"


def tool_glue(tokenizer) -> tuple[str, str]:
    """(prefix, suffix) of a tool result in the tokenizer's chat template."""
    messages = [{"role": "user", "content": "u"},
                {"role": "assistant", "content": _CALL},
                {"role": "tool", "content": _OUTPUT}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True)
    except Exception as e:  # noqa: BLE001 - jinja raises many kinds on a template without tools
        raise ValueError(f"the tokenizer's chat template cannot render a tool message "
                         f"({type(e).__name__}: {e})") from e
    if _CALL not in text or _OUTPUT not in text:
        raise ValueError("the tokenizer's chat template drops tool messages: use a template "
                         "with a tool role (env.call_format=hermes needs one)")
    after_call = text.index(_CALL) + len(_CALL)
    at_output = text.index(_OUTPUT)
    return text[after_call:at_output], text[at_output + len(_OUTPUT):]
