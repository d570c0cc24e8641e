"""The ``sft`` section: what ``rrl sft`` adds to a run's config (the rest is shared with ``rrl train``).

``rrl sft`` reads its rows from ``data.train`` / ``data.val`` (the same sources, ``data.chat_template``,
``data.system_prompt`` and ``data.on_bad_row``), trains ``model.*`` with ``optim.*`` and checkpoints by
``trainer.checkpoint_every`` / ``keep_checkpoints`` / ``resume`` / ``export``; these keys are SFT's own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reasoning_rl.config.base import _Section


class SftConfig(_Section):
    epochs: int = Field(default=1, ge=1, description="Passes over the training rows.")
    max_steps: int | None = Field(
        default=None, ge=1, description="Stop after this many optimizer steps (None: all epochs)."
    )
    batch_size: int = Field(
        default=8,
        ge=1,
        description="Sequences per optimizer step over all ranks; the forwards within it are accumulated "
        "(gradient accumulation) under the token budget sft.micro_batch_tokens.",
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of one forward (positions, padding included); None: as for rrl train "
        "(the memory plan on CUDA, 4096 or the longest row on CPU).",
    )
    packing: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Micro-batch layout: packed rows, right-padded blocks, or whichever is cheaper.",
    )
    max_length: int = Field(default=2048, ge=2, description="Longest row in tokens, after templating.")
    on_long: Literal["truncate", "drop"] = Field(
        default="truncate",
        description="A row over sft.max_length: cut to it (a row left with no assistant token is dropped) "
        "or drop it; either is counted and reported.",
    )
    append_eos: bool = Field(
        default=True,
        description="End a conversation whose last turn is the assistant's with the tokenizer's EOS token "
        "(trained), so the model learns to stop.",
    )
    val_fraction: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Hold out this share of data.train (seeded) as the eval split when data.val is empty.",
    )
    eval_every: int = Field(
        default=0, ge=0, description="Eval loss / token accuracy every k steps (0: after each epoch)."
    )
    messages_key: str = Field(
        default="messages", description="Column of chat rows: a list of {role, content} messages."
    )
    prompt_key: str = Field(
        default="prompt",
        description="Column of prompt/response rows' prompt (text or a message list); dotted for nested "
        "columns (verl's SFT parquet: extra_info.question).",
    )
    response_key: str = Field(
        default="response",
        description="Column of prompt/response rows' response text; dotted for nested columns "
        "(verl's SFT parquet: extra_info.answer).",
    )
