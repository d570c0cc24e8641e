"""Prompt token ids from examples: the tokenizer's chat template, or plain concatenated text without one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reasoning_rl.data.schema import DataError, Example


@dataclass(frozen=True)
class Prompt:
    """An example with its rendered prompt: what the sampler draws and the engine generates from."""

    example: Example
    token_ids: list[int]


def render_prompt(tokenizer: Any, example: Example, *, chat_template: bool) -> list[int]:
    """Token ids of the prompt, ending where the assistant's reply starts."""
    messages = [dict(m) for m in example.messages]
    if chat_template:
        if not getattr(tokenizer, "chat_template", None):
            raise DataError(
                "the tokenizer has no chat template; set data.chat_template=false to feed prompts as plain text"
            )
        enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = enc["input_ids"] if hasattr(enc, "keys") else enc
        return [int(i) for i in ids]
    text = "\n\n".join(m["content"] for m in messages)
    return [int(i) for i in tokenizer(text, add_special_tokens=True)["input_ids"]]


def render_all(tokenizer: Any, examples: list[Example], *, chat_template: bool, max_prompt_tokens: int,
               skip_long: bool) -> tuple[list[Prompt], int]:
    """Render every prompt up front; prompts over the budget raise (or are skipped and counted when
    ``skip_long``)."""
    kept: list[Prompt] = []
    skipped = 0
    for ex in examples:
        ids = render_prompt(tokenizer, ex, chat_template=chat_template)
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
