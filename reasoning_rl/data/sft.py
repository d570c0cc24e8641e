"""Supervised fine-tuning rows -> token ids and a loss mask (1 on the assistant's tokens, 0 elsewhere).

Rows: chat rows (``sft.messages_key``: ``[{role, content}, ...]``, roles system / user / assistant / tool) or
prompt/response rows (``sft.prompt_key`` / ``sft.response_key``, dotted for nested columns as in verl's SFT
parquet; a prompt may be a message list, as in verl's RL parquet). Rendered with the tokenizer's chat template
(or ``data.chat_template``); each assistant turn's tokens are found by rendering the conversation up to it, so
system, user and tool tokens never carry loss, exactly as inserted tool output carries none in RL
(``TokenBatch.model_mask``). Every row is read before training; a bad one raises naming its file and row, or
with ``data.on_bad_row=skip`` costs that row alone and is counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2

from reasoning_rl.config import DataConfig, SftConfig, SourceConfig
from reasoning_rl.data.loading import read_source
from reasoning_rl.data.prompts import chat_template_text
from reasoning_rl.data.schema import DataError

SFT_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class SftExample:
    """One conversation as tokens: ``mask[i]`` 1 where token ``i`` is trained (an assistant token)."""

    ids: list[int]
    mask: list[int]
    where: str


@dataclass
class SftReport:
    """What loading saw: rows kept, rows skipped (with reasons), rows truncated or dropped for length."""

    kept: int = 0
    skipped: list[str] = field(default_factory=list)
    truncated: int = 0
    dropped_long: int = 0

    def summary(self) -> str:
        return (
            f"{self.kept} rows kept, {len(self.skipped)} skipped as malformed, {self.truncated} truncated and "
            f"{self.dropped_long} dropped over sft.max_length"
        )


def _dotted(row: Mapping[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _messages_of(value: Any, where: str, key: str) -> list[dict[str, str]]:
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise DataError(f"{where}: '{key}' must be a non-empty list of {{role, content}} messages")
    out = []
    for i, m in enumerate(value):
        role = m.get("role") if isinstance(m, Mapping) else None
        content = m.get("content") if isinstance(m, Mapping) else None
        if role not in SFT_ROLES or not isinstance(content, str):
            raise DataError(
                f"{where}: {key}[{i}] must be {{role: {'|'.join(SFT_ROLES)}, content: text}}; got {m!r}"[:300]
            )
        out.append({"role": str(role), "content": content})
    return out


def row_messages(row: Any, where: str, sft: SftConfig, system_prompt: str | None) -> list[dict[str, str]]:
    """The conversation of one row (chat or prompt/response), with ``data.system_prompt`` put first."""
    if not isinstance(row, Mapping):
        raise DataError(f"{where}: a row must be a mapping, got {type(row).__name__}")
    if _dotted(row, sft.messages_key) is not None:
        messages = _messages_of(_dotted(row, sft.messages_key), where, sft.messages_key)
    else:
        prompt, response = _dotted(row, sft.prompt_key), _dotted(row, sft.response_key)
        if prompt is None or response is None:
            raise DataError(
                f"{where}: no '{sft.messages_key}' and no '{sft.prompt_key}'/'{sft.response_key}' columns "
                f"(columns: {', '.join(map(str, row))}); set sft.messages_key or sft.prompt_key/response_key"
            )
        if not isinstance(response, str):
            raise DataError(f"{where}: '{sft.response_key}' must be text, got {type(response).__name__}")
        messages = (
            [{"role": "user", "content": prompt}]
            if isinstance(prompt, str)
            else _messages_of(prompt, where, sft.prompt_key)
        )
        messages.append({"role": "assistant", "content": response})
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no assistant turn (nothing to train on)")
    if system_prompt is not None and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": system_prompt})
    return messages


def _render(tokenizer: Any, messages: list[dict[str, str]], template: str | None, gen: bool) -> list[int]:
    if not messages:
        return []
    try:
        enc = tokenizer.apply_chat_template(
            messages, chat_template=template, add_generation_prompt=gen, tokenize=True
        )
    except jinja2.TemplateError as exc:
        raise DataError(f"chat template: {type(exc).__name__}: {exc}") from None
    ids = enc["input_ids"] if hasattr(enc, "keys") else enc
    return [int(i) for i in ids]


def _templated(tokenizer: Any, messages: list[dict[str, str]], template: str | None, where: str) -> Any:
    full = _render(tokenizer, messages, template, False)
    mask = [0] * len(full)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(_render(tokenizer, messages[:k], template, True))
        upto = _render(tokenizer, messages[: k + 1], template, False)
        if full[: len(upto)] != upto or start > len(upto):
            raise DataError(
                f"{where}: the chat template does not render turn {k} as a prefix of the whole conversation "
                "(it rewrites earlier turns), so its assistant tokens cannot be located; train on "
                "prompt/response rows or set data.chat_template to a prefix-stable template"
            )
        mask[start : len(upto)] = [1] * (len(upto) - start)
    return full, mask


def _plain(tokenizer: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    ids: list[int] = []
    mask: list[int] = []
    for k, m in enumerate(messages):
        text = m["content"] if k == 0 else "\n\n" + m["content"]
        piece = [int(i) for i in tokenizer(text, add_special_tokens=k == 0)["input_ids"]]
        ids += piece
        mask += [int(m["role"] == "assistant")] * len(piece)
    return ids, mask


def tokenize_conversation(
    tokenizer: Any, messages: list[dict[str, str]], *, chat_template: bool | str, append_eos: bool, where: str
) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of a conversation: the chat template's rendering (``chat_template`` True: the
    tokenizer's; a string: that Jinja template) or plain text, ``\\n\\n``-joined. The first token never
    carries loss (nothing predicts it)."""
    if chat_template is False:
        ids, mask = _plain(tokenizer, messages)
    else:
        template = chat_template if isinstance(chat_template, str) else None
        if template is None and not getattr(tokenizer, "chat_template", None):
            raise DataError(
                "the tokenizer has no chat template; set data.chat_template to a Jinja template (inline or a "
                "file), or data.chat_template=false for plain text"
            )
        ids, mask = _templated(tokenizer, messages, template, where)
    eos = getattr(tokenizer, "eos_token_id", None)
    if append_eos and eos is not None and messages[-1]["role"] == "assistant" and ids and ids[-1] != eos:
        ids, mask = [*ids, int(eos)], [*mask, 1]
    if mask:
        mask[0] = 0
    if not any(mask):
        raise DataError(f"{where}: the assistant turns render to no tokens (nothing to train on)")
    return ids, mask


def load_sft_rows(
    sources: list[SourceConfig],
    data: DataConfig,
    sft: SftConfig,
    tokenizer: Any,
    *,
    seed: int,
    report: SftReport,
) -> list[SftExample]:
    """Every row of ``sources`` tokenized with its loss mask; bad rows raise or (``data.on_bad_row=skip``) are
    counted in ``report``, and rows over ``sft.max_length`` are truncated or dropped (counted)."""
    template: bool | str = data.chat_template
    if isinstance(template, str):
        template = chat_template_text(template)
    out: list[SftExample] = []
    for source in sources:
        rows, _ = read_source(source, seed)
        kept = 0
        for where, raw in rows:
            if source.limit is not None and kept >= source.limit:
                break
            try:
                if isinstance(raw, DataError):
                    raise raw
                messages = row_messages(raw, where, sft, data.system_prompt)
                ids, mask = tokenize_conversation(
                    tokenizer, messages, chat_template=template, append_eos=sft.append_eos, where=where
                )
            except DataError as exc:
                if data.on_bad_row == "error":
                    raise DataError(
                        f"{exc}\n(set data.on_bad_row=skip to skip malformed rows and count them)"
                    ) from None
                report.skipped.append(str(exc))
                continue
            if len(ids) > sft.max_length:
                ids, mask = ids[: sft.max_length], mask[: sft.max_length]
                if sft.on_long == "drop" or not any(mask):
                    report.dropped_long += 1
                    continue
                report.truncated += 1
            out.append(SftExample(ids, mask, where))
            kept += 1
        if kept == 0:
            raise DataError(f"dataset {source.path or source.generator!r} has no usable SFT rows")
    report.kept += len(out)
    return out
