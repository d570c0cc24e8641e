"""The shapes every grader, the runtime and the trainer agree on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

Verdict = Literal["correct", "incorrect", "error"]
VERDICTS: tuple[Verdict, ...] = ("correct", "incorrect", "error")


@dataclass(frozen=True, slots=True)
class Grade:
    """One judgement: ``correct`` (score 1, or a partial score), ``incorrect`` (score 0) or ``error``.

    The rule every grader follows: ``error`` means the *infrastructure* could not judge (a sandbox or pool
    failure, a grader bug, a ground truth that cannot be parsed or checked); the trainer masks it instead of
    training on a fake 0. Whatever the *response* causes is ``incorrect``, with the reason: an answer that trips
    an expression guard, a prediction that alone exhausts the grader's budget, a proof that times out, crashes
    the checker or overflows its stack. Otherwise a policy would learn to force ``error`` (never penalised)
    whenever it is unsure. ``response_fault`` builds those grades; the math and Lean graders take the per-run
    option ``mask_response_faults=True`` to keep the old behaviour (such grades become ``error``), off by
    default. The trainer masks exactly ``verdict == "error"``.
    """

    score: float
    verdict: Verdict
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        if not 0.0 <= self.score <= 1.0:
            raise ValueError(f"score must be in [0, 1], got {self.score!r}")

    @classmethod
    def correct(cls, reason: str = "", **details: Any) -> Grade:
        return cls(1.0, "correct", reason, details)

    @classmethod
    def incorrect(cls, reason: str = "", **details: Any) -> Grade:
        return cls(0.0, "incorrect", reason, details)

    @classmethod
    def error(cls, reason: str, **details: Any) -> Grade:
        return cls(0.0, "error", reason, details)

    @classmethod
    def response_fault(cls, reason: str, *, mask: bool = False, **details: Any) -> Grade:
        """The response exhausted a budget, tripped a guard or broke the checker: ``incorrect`` (marked
        ``response_fault`` in the details), or ``error`` when the run asked to ``mask`` such faults."""
        return cls(0.0, "error" if mask else "incorrect", reason, {**details, "response_fault": True})

    @classmethod
    def refused_call(
        cls, check_options: Callable[[dict[str, Any]], None], options: dict[str, Any], response: object
    ) -> Grade | None:
        """The ``error`` grade of a call a grader cannot judge (options its ``check_options`` refuses, or a
        response that is not a string: the caller's mistake, never the response's content); None if sound."""
        try:
            check_options(options)
        except ValueError as exc:
            return cls.error(str(exc))
        if not isinstance(response, str):
            return cls.error(f"response must be a string, got {type(response).__name__}")
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "verdict": self.verdict, "reason": self.reason, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Grade:
        return cls(
            float(data["score"]), data["verdict"], data.get("reason", ""), dict(data.get("details") or {})
        )


@runtime_checkable
class Grader(Protocol):
    """What a grader plugin implements. ``version`` enters the cache key: bump it when judgements change.

    Optional: ``check_options(options)`` (raise ValueError), ``warm()``, ``context_fields`` (and
    ``optional_context_fields``), ``source_module`` (another module whose code defines its judgements: it
    enters the cache version, as the function adapter's wrapped function does), and
    ``check_gold(ground_truth) -> str | None`` (why no answer can be judged against this gold; asked when a
    run's data loads, through ``graders.runtime.gold_problems``) with ``release()`` (free what it started)."""

    name: str
    version: str

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade: ...


ContextField = Literal["prompt", "messages", "data_source", "extra_info", "row_id"]
CONTEXT_FIELDS: tuple[ContextField, ...] = ("prompt", "messages", "data_source", "extra_info", "row_id")


class ContextError(ValueError):
    """A grader asked for a context field the row does not have (the message names the field and the row)."""


@dataclass(frozen=True, slots=True)
class GradeContext:
    """What a grader may see of the row besides the response and the ground truth (verl's ``data_source`` /
    ``extra_info``, TRL's prompt and dataset columns). A grader opts in with a class attribute
    ``context_fields = ("prompt", "extra_info")`` and a ``context`` keyword in ``grade``; the runtime then sends
    it exactly those fields (the rest are None) and only those enter its cache key. Graders without the
    attribute never get a context. None means the row has no such field.

    ``prompt`` is the text of the last user message (the question as the model was asked it), ``messages``
    the whole chat as the model got it before templating, ``row_id`` the row's id (or its number).
    """

    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    data_source: str | None = None
    extra_info: dict[str, Any] | None = None
    row_id: str | None = None

    @classmethod
    def from_messages(
        cls,
        messages: Any,
        *,
        data_source: str | None = None,
        extra_info: dict[str, Any] | None = None,
        row_id: str | None = None,
    ) -> GradeContext:
        """A context from chat messages (a plain string prompt is one user message); ``prompt`` is derived."""
        if isinstance(messages, str):
            msgs: tuple[dict[str, str], ...] | None = ({"role": "user", "content": messages},)
        elif messages is None:
            msgs = None
        else:
            msgs = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in messages)
        users = [m["content"] for m in msgs or () if m["role"] == "user"]
        return cls(users[-1] if users else None, msgs, data_source, extra_info, row_id)

    def only(self, fields: tuple[ContextField, ...], optional: tuple[ContextField, ...] = ()) -> GradeContext:
        """This context with every field outside ``fields`` and ``optional`` cleared (what a grader declaring
        them receives); ``ContextError`` naming the first of ``fields`` this row lacks (an ``optional`` one it
        lacks stays None)."""
        for name in fields:
            if getattr(self, name) is None:
                raise ContextError(
                    f"the grader needs context field {name!r}, which row {self.row_id!r} does not have"
                )
        return GradeContext(**{name: getattr(self, name) for name in (*fields, *optional)})

    def key(self, fields: tuple[ContextField, ...]) -> dict[str, Any]:
        """The declared fields as they enter a cache key."""
        return {name: getattr(self, name) for name in fields}


def context_fields(grader: object) -> tuple[ContextField, ...]:
    """The context fields a grader declares (``context_fields`` class attribute), checked and in canonical
    order; () for a grader that wants none. TypeError for an unknown name, so a typo fails at load. Every row
    must have them (a run stops before step 1 naming the row that lacks one)."""
    return _declared_fields(grader, "context_fields")


def optional_context_fields(grader: object) -> tuple[ContextField, ...]:
    """The context fields a grader reads when the row has them (``optional_context_fields``; None when it
    does not, never a refused row), e.g. verl's ``extra_info=None``; those it also requires are left out.
    They are sent and enter the cache key like the required ones."""
    required = set(context_fields(grader))
    return tuple(f for f in _declared_fields(grader, "optional_context_fields") if f not in required)


def _declared_fields(grader: object, attr: str) -> tuple[ContextField, ...]:
    declared = getattr(grader, attr, ())
    if isinstance(declared, str) or not isinstance(declared, tuple | list | frozenset | set):
        raise TypeError(f"grader {getattr(grader, 'name', grader)!r}: {attr} must be a tuple of names")
    unknown = sorted(set(declared) - set(CONTEXT_FIELDS))
    if unknown:
        raise TypeError(
            f"grader {getattr(grader, 'name', grader)!r} declares unknown context field(s) {unknown}; "
            f"known: {', '.join(CONTEXT_FIELDS)}"
        )
    return tuple(f for f in CONTEXT_FIELDS if f in declared)
