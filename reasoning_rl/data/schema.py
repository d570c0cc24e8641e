"""One training row, normalised from the verl schema or the simple question/answer schema.

verl: ``data_source``, ``prompt`` (chat messages or text), ``reward_model.ground_truth``, ``ability``,
``extra_info``. Simple: ``question`` or ``problem`` + ``answer`` (or ``ground_truth``). Either may carry an
explicit ``grader``. Rows that fit neither raise ``DataError`` naming the file and row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graders import RowGraderError, known_source_grader, row_grader
from graders.gsm8k_rows import gsm8k_gold
from reasoning_rl.config import RowConfig

ROLES = ("system", "user", "assistant")
DEFAULT_TEMPLATE = "{question}"  # data.prompt_template's default: the question as it is


class DataError(ValueError):
    """A malformed dataset row or file; the message says where (file and 1-based row) and what is wrong."""


@dataclass(frozen=True)
class Example:
    """A prompt ready for templating plus what grading it needs."""

    uid: str
    data_source: str
    messages: tuple[Mapping[str, str], ...]
    ground_truth: Any
    grader: str
    extra_info: dict[str, Any] | None = None  # None: the row has none (a grader asking for it is refused)


def _format(template: str, row: Mapping[str, Any], question: str) -> str:
    fields = {k: v for k, v in row.items() if isinstance(k, str)}
    fields["question"] = question
    try:
        return template.format(**fields)
    except (KeyError, IndexError) as exc:
        raise ValueError(f"data.prompt_template refers to {exc} which this row lacks") from None


def _chat(prompt: Any) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, list | tuple) or not prompt:
        raise ValueError("'prompt' must be a non-empty string or list of chat messages")
    msgs = []
    for i, m in enumerate(prompt):
        if not isinstance(m, Mapping) or not isinstance(m.get("content"), str):
            raise ValueError(f"prompt[{i}] must be a mapping with a string 'content'")
        if m.get("role") not in ROLES:
            raise ValueError(f"prompt[{i}].role must be one of {ROLES}, got {m.get('role')!r}")
        msgs.append({"role": str(m["role"]), "content": str(m["content"])})
    return msgs


def _messages(row: Mapping[str, Any], rules: RowConfig) -> list[dict[str, str]]:
    """The row's chat messages with ``data.prompt_template`` and ``data.system_prompt`` applied. The template
    formats the question of a simple row and the last user message of a verl row alike (a template the user
    set is never dropped silently); a row it or the system prompt cannot reach is refused with the reason."""
    prompt = row.get("prompt")
    if prompt is not None:
        msgs = _chat(prompt)
        users = [i for i, m in enumerate(msgs) if m["role"] == "user"]
        if users:
            last = msgs[users[-1]]
            last["content"] = _format(rules.prompt_template, row, last["content"])
        elif rules.prompt_template != DEFAULT_TEMPLATE:
            raise ValueError(
                "data.prompt_template is set but this row's prompt has no user message to apply it to"
            )
    else:
        question = row.get("question", row.get("problem"))
        if not isinstance(question, str) or not question.strip():
            raise ValueError("needs 'prompt' (verl schema) or a non-empty 'question'/'problem' string")
        msgs = [{"role": "user", "content": _format(rules.prompt_template, row, question)}]
    if rules.system_prompt:
        if msgs[0]["role"] == "system":
            raise ValueError(
                "data.system_prompt is set but this row has its own system message, which would replace it; "
                "unset data.system_prompt or drop the row's system message"
            )
        msgs.insert(0, {"role": "system", "content": rules.system_prompt})
    return msgs


def _raw_ground_truth(row: Mapping[str, Any]) -> Any:
    rm = row.get("reward_model")
    if isinstance(rm, Mapping) and rm.get("ground_truth") is not None:
        return rm["ground_truth"]
    for key in ("answer", "ground_truth"):
        if row.get(key) is not None:
            return row[key]
    raise ValueError("needs a ground truth: 'reward_model.ground_truth', 'answer' or 'ground_truth'")


def _ground_truth(row: Mapping[str, Any]) -> tuple[Any, bool]:
    """(the gold, whether it was a GSM8K worked solution whose final number was taken); ``NotAGold``
    (a ValueError) for a GSM8K-shaped one with no number to take."""
    raw = _raw_ground_truth(row)
    final = gsm8k_gold(raw)
    return (raw, False) if final is None else (final, True)


def route_grader(row: Mapping[str, Any], data_source: str, rules: RowConfig) -> str:
    """Explicit row ``grader`` (a registered name only: ``graders.row_grader``) > mapping of ``data_source`` >
    mapping of ``ability`` > the well-known ``data_source`` default (``graders.KNOWN_SOURCES``: verl's
    ``openai/gsm8k`` -> ``gsm8k``) > default. ``RowGraderError`` for a row naming a ``module:attr`` spec."""
    own = row_grader(row, trusted="data.default_grader / data.grader_map / grading.rewards")
    if own is not None:
        return own
    if data_source in rules.grader_map:
        return rules.grader_map[data_source]
    ability = row.get("ability")
    if isinstance(ability, str) and ability in rules.grader_map:
        return rules.grader_map[ability]
    return known_source_grader(data_source) or rules.default_grader


def normalize_row(
    row: Mapping[str, Any],
    *,
    where: str,
    uid: str,
    default_source: str,
    rules: RowConfig,
    known_graders: frozenset[str] | None = None,
    on_gsm8k: Callable[[], None] | None = None,
) -> Example:
    """Turn one raw row into an ``Example``; any problem becomes a ``DataError`` prefixed with ``where``.
    ``on_gsm8k`` is called when the row's gold was a GSM8K worked solution (its final number is the gold)."""
    if not isinstance(row, Mapping):
        raise DataError(f"{where}: row must be a JSON object, got {type(row).__name__}")
    try:
        messages = _messages(row, rules)
        truth, from_gsm8k = _ground_truth(row)
    except ValueError as exc:
        raise DataError(f"{where}: {exc}") from None
    source = row.get("data_source") or default_source
    try:
        grader = route_grader(row, str(source), rules)
    except RowGraderError as exc:
        raise DataError(f"{where}: {exc}") from None
    # "module:attr" specs (from the config only) are resolved by the grading runtime itself.
    if known_graders is not None and ":" not in grader and grader not in known_graders:
        raise DataError(
            f"{where}: grader {grader!r} is not installed; available: {', '.join(sorted(known_graders))}"
        )
    extra = row.get("extra_info")
    if extra is not None and not isinstance(extra, Mapping):
        raise DataError(f"{where}: 'extra_info' must be an object, got {type(extra).__name__}")
    if from_gsm8k and on_gsm8k is not None:
        on_gsm8k()
    return Example(
        uid=uid,
        data_source=str(source),
        messages=tuple(messages),
        ground_truth=truth,
        grader=grader,
        extra_info=dict(extra) if extra is not None else None,
    )
