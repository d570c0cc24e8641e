"""The driver/rank boundary, typed (issue 43). The driver asks a rank for a method of its class by reference
(``ModelWorker.lr``, ``EngineRank.engine_wake``), with each rank's arguments in a ``RankArgs`` written beside it,
so mypy checks that the method exists, the arguments fit its parameters and what comes back. No call crosses the
boundary by a string: ``method_name`` is the one place a reference becomes a name, and ``apply`` the one place
a rank runs a call (in the driver's process or in a Ray actor).

Generating ranks are of two classes (a colocated ``ModelWorker``, split placement's ``RolloutWorker``), so what
the driver may ask of them is a protocol each declares it implements: ``EngineRank``; ``LiveRank`` adds the
continuous-rollout calls only split placement's rollout ranks answer.

Public names (stable): ``RankArgs``, ``method_name``, ``apply``, ``EngineRank``, ``LiveRank``, ``one_version``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

from reasoning_rl.distributed.live_engine import Advanced
from reasoning_rl.rollout import Completion, Request, SamplingConfig

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

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]: ...

    def engine_sleep(self, keep_weights: bool) -> None: ...

    def engine_wake(self) -> None: ...

    def engine_asleep(self) -> bool: ...

    def engine_version(self) -> int:
        """The policy version of the weights this rank's engine holds (the engine's own record)."""
        ...

    def live(self) -> bool:
        """Whether this rank's engine decodes on its own between the driver's calls (then it is a ``LiveRank``)."""
        ...


class LiveRank(EngineRank, Protocol):
    """A generating rank whose ``LiveEngine`` the driver's ``RemoteEngine`` steers (``live()`` is true)."""

    def live_submit(self, requests: list[Request]) -> None: ...

    def live_advance(self) -> Advanced: ...

    def live_abort(self, ids: list[str]) -> None: ...

    def live_version(self) -> int:
        """The policy version the live engine holds now (a swap changes it between two decode steps)."""
        ...


def one_version(versions: list[int]) -> int:
    """The version every generating rank reports; ranks that disagree are a missed hand-off: an error."""
    if len(set(versions)) != 1:
        raise RuntimeError(
            f"the rollout ranks hold different policy versions {versions}: a hand-off was missed"
        )
    return versions[0]
