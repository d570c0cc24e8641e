"""Prompt token ids from examples: a chat template (the tokenizer's or the config's), or plain concatenated text."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from reasoning_rl.data.schema import DataError, Example


@dataclass(frozen=True)
class Prompt:
    """An example with its rendered prompt: what the sampler draws and the engine generates from."""

    example: Example
    token_ids: list[int]


def chat_template_text(value: str) -> str:
    """``data.chat_template`` given as a string: the Jinja template itself, or the path of a file holding it."""
    if "{%" in value or "{{" in value:
        return value
    path = Path(value).expanduser()
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise DataError(f"data.chat_template file {value} is empty")
        return text
    raise DataError(
        f"data.chat_template={value!r} is neither an existing file nor a Jinja template "
        "(an inline template contains '{%' or '{{'); use true/false for the tokenizer's own or none"
    )


def render_prompt(
    tokenizer: Any, example: Example, *, chat_template: bool | str, tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """Token ids of the prompt, ending where the assistant's reply starts. A string ``chat_template`` is the
    template text itself (``chat_template_text`` reads a file). ``tools``: function schemas the chat template
    lists in its system prompt (Qwen2.5 / Qwen3 templates render them as ``<tools>``)."""
    messages = [dict(m) for m in example.messages]
    if isinstance(chat_template, str):
        try:
            enc = tokenizer.apply_chat_template(
                messages, chat_template=chat_template, tools=tools, add_generation_prompt=True, tokenize=True
            )
        except jinja2.TemplateError as exc:
            raise DataError(f"data.chat_template: {type(exc).__name__}: {exc}") from None
    elif chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise DataError(
                "the tokenizer has no chat template; set data.chat_template to a Jinja template (inline or a "
                "file), or data.chat_template=false to feed prompts as plain text"
            )
        enc = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    else:
        text = "\n\n".join(m["content"] for m in messages)
        return [int(i) for i in tokenizer(text, add_special_tokens=True)["input_ids"]]
    ids = enc["input_ids"] if hasattr(enc, "keys") else enc
    return [int(i) for i in ids]


def render_all(
    tokenizer: Any,
    examples: list[Example],
    *,
    chat_template: bool | str,
    max_prompt_tokens: int,
    skip_long: bool,
    tools: list[dict[str, Any]] | None = None,
) -> tuple[list[Prompt], int]:
    """Render every prompt up front (``tools``: as ``render_prompt``); prompts over the budget raise (or are
    skipped and counted when ``skip_long``)."""
    template = chat_template_text(chat_template) if isinstance(chat_template, str) else chat_template
    kept: list[Prompt] = []
    skipped = 0
    for ex in examples:
        ids = render_prompt(tokenizer, ex, chat_template=template, tools=tools)
        if len(ids) > max_prompt_tokens:
            if not skip_long:
                raise DataError(
                    f"example {ex.uid!r} ({ex.data_source}): prompt has {len(ids)} tokens > "
                    f"data.max_prompt_tokens={max_prompt_tokens}"
                )
            skipped += 1
            continue
        kept.append(Prompt(ex, ids))
    return kept, skipped
