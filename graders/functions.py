"""A TRL reward function or a verl ``compute_score`` used unchanged as a grader (docs/from-trl-and-verl.md).

- TRL: ``fn(prompts, completions, **kwargs) -> list[float]``, called with one row at a time: ``prompts`` and
  ``completions`` are one-element lists (strings; chat-message lists with the option ``conversational:
  true``), and the kwargs are the row's columns, each a one-element list: ``ground_truth`` and ``answer`` (the
  gold), ``data_source``, ``extra_info`` and every key of ``extra_info``.
- verl: ``compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict`` (a dict
  carries ``score``; an ``acc`` key, when present, is the verdict), called by keyword as verl's reward manager
  calls it (only the parameters the function takes, unless it takes ``**kwargs``).

The style is read from the signature (a ``completions`` parameter: TRL; ``solution_str``: verl). The value
becomes a ``Grade``: options ``range: [lo, hi]`` (default ``[0, 1]``) map it linearly onto the score, and the
verdict is ``correct`` when it reaches ``threshold`` (default ``hi``). What cannot be judged is an ``error``
for that row alone, in one line naming the function and the row: a raise (option ``on_raise: incorrect``
scores it 0 instead), a result of the wrong type or length, None (TRL's "not applicable"), NaN, a value
outside ``range``. The grading runtime adds what every grader gets: a worker process, a hard budget, the cache.

In a config: ``grading.rewards: [{function: "module:fn"}]``; in the runtime, the spec ``function=module:fn``
(``function_spec``); in Python, ``from_function(fn)``.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import traceback
from collections.abc import Callable
from functools import reduce
from typing import Any, Literal

from graders.types import CONTEXT_FIELDS, Grade, GradeContext

Style = Literal["trl", "verl"]
STYLES: tuple[Style, ...] = ("trl", "verl")
FUNCTION_PREFIX = (
    "function="  # a grader spec for a function: "function=module:attr" ("=" is in no module name)
)
OPTIONS = ("range", "threshold", "conversational", "on_raise")
_VERL_PARAMS = ("data_source", "solution_str", "ground_truth", "extra_info")


def function_spec(target: str) -> str:
    """The grader spec of the function at ``target`` (``"module:attr"``, attr may be dotted)."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a function is named as 'module:function', got {target!r}")
    return FUNCTION_PREFIX + target


def is_function_spec(spec: str) -> bool:
    return spec.startswith(FUNCTION_PREFIX)


def load_function_spec(spec: str) -> FunctionGrader:
    """The grader of a ``function=module:attr`` spec. ImportError / AttributeError when it cannot be found,
    TypeError when it is not a function of either style."""
    target = spec.removeprefix(FUNCTION_PREFIX)
    module_name, _, attr = target.partition(":")
    fn: Any = reduce(getattr, attr.split("."), importlib.import_module(module_name))
    return from_function(fn, spec=spec)


def detect_style(fn: Callable[..., Any]) -> Style:
    """ "trl" for a function with a ``completions`` parameter, "verl" for one with ``solution_str``."""
    params = _params(fn)
    if "solution_str" in params:
        return "verl"
    if "completions" in params:
        return "trl"
    raise TypeError(
        f"{_name(fn)} is neither a TRL reward function (a `completions` parameter) nor a verl compute_score "
        f"(a `solution_str` parameter); its parameters: {', '.join(params) or '(none)'}"
    )


def from_function(
    fn: Callable[..., Any], *, style: Style | None = None, name: str | None = None, spec: str | None = None
) -> FunctionGrader:
    """A grader calling ``fn`` (a TRL reward function or a verl ``compute_score``) one row at a time."""
    return FunctionGrader(fn, style=style, name=name, spec=spec)


class FunctionGrader:
    """See the module docstring. ``spec`` is what a grading pool's workers load it by (None for a function
    they cannot import: a lambda, a function defined inside another or in ``__main__``)."""

    version = "1"
    # Every field, none required: a row without extra_info gets extra_info=None, as verl passes it.
    optional_context_fields = CONTEXT_FIELDS

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        style: Style | None = None,
        name: str | None = None,
        spec: str | None = None,
    ) -> None:
        if not callable(fn) or isinstance(fn, type):
            raise TypeError(f"{fn!r} is not a function")
        if style is not None and style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}, got {style!r}")
        self.fn = fn
        self.style: Style = style or detect_style(fn)
        self.name: str = name or str(getattr(fn, "__name__", type(fn).__name__))
        self.source_module = getattr(fn, "__module__", None)  # its source enters the cache version
        self.spec = spec or _importable_spec(fn)
        params = inspect.signature(fn).parameters
        self._any_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self._params = frozenset(params)

    def __repr__(self) -> str:
        return f"FunctionGrader({self.spec or self.name!r}, style={self.style!r})"

    def golden_cases(self) -> list[dict[str, Any]]:
        """None: a function ships no labelled cases (``rrl graders selftest`` lists it as such)."""
        return []

    def check_options(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for function {self.name!r}; known: {', '.join(OPTIONS)}"
            )
        _range(options)
        threshold = options.get("threshold")
        if threshold is not None and not _number(threshold):
            raise ValueError(f"threshold must be a number, got {threshold!r}")
        if not isinstance(options.get("conversational", False), bool):
            raise ValueError("conversational must be true or false")
        if options.get("on_raise", "error") not in ("error", "incorrect"):
            raise ValueError(f"on_raise must be 'error' or 'incorrect', got {options['on_raise']!r}")

    def grade(
        self, response: str, ground_truth: Any, *, context: GradeContext | None = None, **options: Any
    ) -> Grade:
        refused = Grade.refused_call(self.check_options, options, response)
        if refused is not None:
            return refused
        ctx = context or GradeContext()
        where = f"function {self.name!r} (row {ctx.row_id!r})"
        try:
            if self.style == "trl":
                value = self._trl(response, ground_truth, ctx, bool(options.get("conversational", False)))
            else:
                value = self._verl(response, ground_truth, ctx)
        except _BadReturn as exc:
            return Grade.error(f"{where} {exc}")
        except Exception as exc:  # the function's bug or its refusal of this response: this row only
            reason = f"{where} raised {type(exc).__name__}: {_one_line(exc)}"
            tb = traceback.format_exc(limit=6)
            if options.get("on_raise", "error") == "incorrect":
                return Grade.incorrect(reason, traceback=tb, raised=True)
            return Grade.error(reason, traceback=tb)
        return self._to_grade(value, where, options)

    # -- the two calling conventions ----------------------------------------------------------------
    def _trl(self, response: str, truth: Any, ctx: GradeContext, conversational: bool) -> Any:
        if conversational:
            prompt: Any = [dict(m) for m in ctx.messages or ()]
            completion: Any = [{"role": "assistant", "content": response}]
        else:
            prompt, completion = ctx.prompt, response
        columns: dict[str, Any] = {}
        for key, value in (ctx.extra_info or {}).items():
            if isinstance(key, str) and key.isidentifier():
                columns[key] = value
        columns.update(
            ground_truth=truth, answer=truth, data_source=ctx.data_source, extra_info=ctx.extra_info
        )
        columns.pop("prompts", None)
        columns.pop("completions", None)
        kwargs = {"prompts": [prompt], "completions": [completion], **{k: [v] for k, v in columns.items()}}
        result = self.fn(**self._accepted(kwargs))
        if hasattr(result, "tolist") and not isinstance(result, list | tuple):
            result = result.tolist()  # a numpy array or a tensor
        if not isinstance(result, list | tuple):
            raise _BadReturn(f"returned {type(result).__name__}, not a list of floats")
        if len(result) != 1:
            raise _BadReturn(f"returned {len(result)} values for 1 completion")
        return result[0]

    def _verl(self, response: str, truth: Any, ctx: GradeContext) -> Any:
        kwargs = {
            "data_source": ctx.data_source,
            "solution_str": response,
            "ground_truth": truth,
            "extra_info": ctx.extra_info,
        }
        return self.fn(**self._accepted(kwargs))

    def _accepted(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """What the function takes: everything with ``**kwargs``, else only its named parameters."""
        return kwargs if self._any_kwargs else {k: v for k, v in kwargs.items() if k in self._params}

    # -- the value as a grade -----------------------------------------------------------------------
    def _to_grade(self, value: Any, where: str, options: dict[str, Any]) -> Grade:
        details: dict[str, Any] = {}
        acc: Any = None
        if self.style == "verl" and isinstance(value, dict):
            if "score" not in value:
                return Grade.error(
                    f"{where} returned a dict without 'score' (keys: {sorted(map(str, value))})"
                )
            details = {str(k): v for k, v in value.items() if k != "score" and _scalar(v)}
            acc = value.get("acc")
            value = value["score"]
        if value is None:
            return Grade.error(f"{where} returned None (not applicable to this row)")
        if not _number(value):
            return Grade.error(f"{where} returned {type(value).__name__} {_short(value)}, not a number")
        raw = float(value)
        if not math.isfinite(raw):
            return Grade.error(f"{where} returned {raw}")
        lo, hi = _range(options)
        if not lo <= raw <= hi:
            return Grade.error(
                f"{where} returned {raw:g}, outside range [{lo:g}, {hi:g}]: set the component's options.range"
            )
        score = (raw - lo) / (hi - lo)
        threshold = float(options.get("threshold", hi))
        correct = bool(acc) if acc is not None else raw >= threshold
        reason = f"{self.name} returned {raw:g}"
        return Grade(score, "correct" if correct else "incorrect", reason, {**details, "value": raw})


class _BadReturn(Exception):
    """A TRL function's result of the wrong type or length (reported like a raise, never ``on_raise``'d)."""


def _range(options: dict[str, Any]) -> tuple[float, float]:
    bounds = options.get("range", (0.0, 1.0))
    if (
        not isinstance(bounds, list | tuple)
        or len(bounds) != 2
        or not all(_number(b) and math.isfinite(float(b)) for b in bounds)
        or not float(bounds[0]) < float(bounds[1])
    ):
        raise ValueError(f"range must be [low, high] with low < high, got {bounds!r}")
    return float(bounds[0]), float(bounds[1])


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real)  # bool, int, float, numpy's scalars


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | bool | int | float)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _one_line(exc: BaseException) -> str:
    try:
        text = " ".join(str(exc).split())
    except Exception:  # an exception whose message cannot be built is still reported, by its type
        return "<unprintable>"
    return text if len(text) <= 300 else text[:297] + "..."


def _params(fn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"


def _importable_spec(fn: Callable[..., Any]) -> str | None:
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    return function_spec(f"{module}:{qualname}")
