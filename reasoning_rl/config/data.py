"""Where rows come from and how they become prompts: the data section and its sources."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from reasoning_rl.config.base import _Section


class SourceConfig(_Section):
    """One dataset: a file/dir/hub name (``path``) or a built-in seeded generator (``generator``)."""

    path: str | None = Field(
        default=None,
        description="JSONL(.gz) or parquet file, HF dataset dir, or hub dataset name (set this or generator).",
    )
    split: str = Field(default="train", description="Split to read from a dataset dir or hub dataset.")
    generator: Literal["arithmetic", "fixed_digit", "word_chain"] | None = Field(
        default=None, description="A built-in seeded task generator instead of a path (seeded by run.seed)."
    )
    size: int = Field(default=256, ge=1, description="Rows to generate (generator only).")
    options: dict[str, Any] = Field(default_factory=dict, description="Generator options.")
    limit: int | None = Field(default=None, ge=1, description="Use only the first N rows.")
    data_source: str | None = Field(default=None, description="Default data_source for rows that have none.")

    @model_validator(mode="after")
    def _one_of(self) -> SourceConfig:
        if (self.path is None) == (self.generator is None):
            raise ValueError("set exactly one of 'path' or 'generator'")
        return self


class RowConfig(_Section):
    """How rows become examples: the row keys of ``data`` (which extends this), read by ``data.schema``."""

    prompt_template: str = Field(
        default="{question}",
        description="Python format string for each prompt: a simple row's question, or the last user message "
        "of a verl chat row ({question}, plus any column); a row it cannot reach is refused.",
    )
    system_prompt: str | None = Field(
        default=None,
        description="System message put before each prompt; a row with its own system message is refused "
        "while it is set. None: no system message.",
    )
    grader_map: dict[str, str] = Field(
        default_factory=dict,
        description="data_source or ability -> grader name (explicit row 'grader' wins).",
    )
    default_grader: str = Field(
        default="math",
        description="Grader of rows that neither name one nor match grader_map: a registered name or module:Class.",
    )


class DataConfig(RowConfig):
    train: list[SourceConfig] = Field(
        min_length=1, description="Training sources (a single mapping or path is a one-source list)."
    )
    val: list[SourceConfig] = Field(
        default_factory=list,
        description="Held-out sources for evaluation (eval.*); empty: no evaluation in training.",
    )
    chat_template: bool | str = Field(
        default=True,
        description="true: wrap prompts with the tokenizer's chat "
        "template; false: plain text; a string: this Jinja chat template instead, "
        "inline (contains '{%' or '{{') or a file path (relative to the working "
        "directory).",
    )
    on_bad_row: Literal["error", "skip"] = Field(
        default="error",
        description="A malformed or too-long row: 'error' stops naming file and row; 'skip' drops it and counts it.",
    )
    bad_gold: Literal["exclude", "refuse"] = Field(
        default="exclude",
        description="A row whose ground truth its grader cannot judge (e.g. '\\frac{' for math), found when the "
        "data loads: 'exclude' drops it with a one-line warning (count, first ids); 'refuse' stops the run.",
    )
    max_prompt_tokens: int = Field(
        default=1024, ge=1, description="Longest prompt, in tokens, after templating."
    )
    shuffle: bool = Field(
        default=True, description="Shuffle the prompt order every epoch (seeded by run.seed)."
    )

    @model_validator(mode="before")
    @classmethod
    def _single_source(cls, data: Any) -> Any:
        """Allow ``train: {path: ...}`` as shorthand for a one-element list."""
        if isinstance(data, dict):
            for key in ("train", "val"):
                if isinstance(data.get(key), dict | str):
                    value = data[key]
                    data = {**data, key: [{"path": value} if isinstance(value, str) else value]}
        return data
