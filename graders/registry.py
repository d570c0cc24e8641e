"""Grader registry: built-ins and third-party plugins both come from the ``reasoning_rl.graders`` entry points."""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from graders.types import Grader

ENTRY_POINT_GROUP = "reasoning_rl.graders"

# Built-ins resolve even from a source checkout that was never pip-installed (no entry-point metadata).
BUILTIN: dict[str, str] = {
    "math": "graders.math:MathGrader",
    "gsm8k": "graders.math.gsm8k:GSM8KGrader",
    "code": "graders.code:CodeGrader",
    "lean": "graders.lean:LeanGrader",
    "format": "graders.format:FormatGrader",
    "length": "graders.format:LengthGrader",
    # Model-backed graders need torch/transformers, so they live on the training side (reasoning_rl), named
    # here by string only: loading one without torch fails that grader alone (`rrl graders list` says why).
    "reward_model": "reasoning_rl.model_graders:RewardModelGrader",
    "judge": "reasoning_rl.model_graders:JudgeGrader",
}

_registered: dict[str, Grader] = {}


class UnknownGraderError(KeyError):
    """Raised for a grader name nobody registered; the message lists the ones that exist."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


def _targets() -> dict[str, str]:
    targets = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        targets[ep.name] = ep.value
    return targets


def available() -> list[str]:
    """Names of every grader that can be asked for (loaded or not)."""
    return sorted(set(_targets()) | set(_registered))


def register(grader: Grader, *, replace: bool = False) -> Grader:
    """Register an instance in-process (tests, notebooks); plugins should use the entry point instead."""
    if not isinstance(grader, Grader):
        raise TypeError(f"{grader!r} does not implement the Grader protocol (name, version, grade())")
    if grader.name in _registered and not replace:
        raise ValueError(f"grader {grader.name!r} is already registered; pass replace=True to override")
    _registered[grader.name] = grader
    _load.cache_clear()
    return grader


def unregister(name: str) -> None:
    _registered.pop(name, None)
    _load.cache_clear()


@cache
def _load(name: str) -> Grader:
    if name in _registered:
        return _registered[name]
    targets = _targets()
    if name not in targets:
        raise UnknownGraderError(f"unknown grader {name!r}; available: {', '.join(available()) or '(none)'}")
    module_name, _, attr = targets[name].partition(":")
    obj: Any = getattr(importlib.import_module(module_name), attr)
    grader = obj() if isinstance(obj, type) else obj
    if not isinstance(grader, Grader):
        raise TypeError(
            f"entry point {name!r} -> {targets[name]} is not a Grader (needs name, version, grade())"
        )
    return grader


def get(name: str) -> Grader:
    """The grader registered under ``name``; instances are created once per process."""
    return _load(name)
