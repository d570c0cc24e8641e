"""The driver/rank boundary, typed (issue 43). The driver asks a rank for a method of its class by reference
(``ModelWorker.lr``, ``EngineRank.engine_wake``), with each rank's arguments in a ``RankArgs`` written beside it,
so mypy checks that the method exists, the arguments fit its parameters and what comes back. No call crosses the
boundary by a string: ``method_name`` is the one place a reference becomes a name, and ``apply`` the one place
a rank runs a call (in the driver's process or in a Ray actor).

Generating ranks are of two classes (a colocated ``ModelWorker``, split placement's ``RolloutWorker``), so what
the driver may ask of them is a protocol each declares it implements: ``EngineRank``, whose ``live_*`` calls are
the continuous engine the driver's ``RemoteEngine`` steers over any placement (``continuous()`` says whether the
rank's engine can take them).

Public names (stable): ``RankArgs``, ``method_name``, ``apply``, ``EngineRank``, ``one_version``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from reasoning_rl.distributed.live_engine import Advanced
from reasoning_rl.rollout import Completion, Delta, Request, SamplingConfig

P = ParamSpec("P")
R = TypeVar("R")


class RankArgs(Generic[P]):
    """One rank's arguments of a call, typed by the method's parameters ``P`` where the call is written (the
    group's ``call`` solves ``P`` from the method reference, so a wrong argument is a mypy error there)."""

    def __init__(self, *args: P.args, **kwargs: P.kwargs) -> None:
        self.args: tuple[Any, ...] = args
        self.kwargs: dict[str, Any] = kwargs


def method_name(method: Callable[..., Any]) -> str:
    """The name a rank answers ``method`` by, and the trace's per-method seconds are keyed by."""
    return method.__name__


def apply(worker: object, method: Callable[..., R], args: RankArgs[...]) -> R:
    """``method`` on ``worker``, looked up by name so that a protocol's method runs the rank class's own."""
    fn: Callable[..., R] = getattr(worker, method_name(method))
    return fn(*args.args, **args.kwargs)


class EngineRank(Protocol):
    """What the driver may ask of every generating rank (colocated: the training ranks; split: the rollout ranks)."""

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """This rank's completions of ``prompts`` (eval and tool waves; none for no prompts)."""
        ...

    def engine_sleep(self, keep_weights: bool) -> None: ...

    def engine_wake(self) -> None: ...

    def engine_asleep(self) -> bool: ...

    def engine_sleep_enabled(self) -> bool:
        """Whether the engine gives its memory up for the update (its unfinished requests are then parked)."""
        ...

    def engine_version(self) -> int:
        """The policy version of the weights this rank's engine holds (the engine's own record)."""
        ...

    def continuous(self) -> bool:
        """Whether this rank's engine takes ``live_*`` calls (a ``ContinuousEngine``; not a plugin engine that
        only streams)."""
        ...

    def live_submit(self, requests: list[Request]) -> None: ...

    def live_advance(self) -> Advanced: ...

    def live_abort(self, ids: list[str]) -> None: ...

    def live_partial(self, ids: list[str]) -> list[Delta]:
        """What these unfinished requests on this rank have so far (for a park or a checkpoint)."""
        ...


def one_version(versions: list[int]) -> int:
    """The version every generating rank reports; ranks that disagree are a missed hand-off: an error."""
    if len(set(versions)) != 1:
        raise RuntimeError(
            f"the rollout ranks hold different policy versions {versions}: a hand-off was missed"
        )
    return versions[0]
