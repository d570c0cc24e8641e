"""``RemoteEngine``: a run's generating ranks as one ``ContinuousEngine`` on the driver (issues 31, 43).

The ``Frontier`` drives it exactly as it drives an in-process engine, at every ``rollout.max_lag`` and over any
placement: several colocated training ranks, each with its engine, or split placement's rollout ranks. Each call
becomes a call on the ranks' ``LiveEngine`` through the group's typed rank calls (``EngineRank``'s ``live_*``
methods). A request goes to rank ``group % R`` (deterministic, whatever arrives when), so all samples of a prompt
group decode on one rank; ``advance`` gathers every rank's deltas (rank order), each stamped with the policy
version that sampled it (a split rollout rank keeps decoding during the update).

Public names (stable): ``RemoteEngine``, ``EngineRanks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from reasoning_rl.distributed.rank import EngineRank, RankArgs, one_version
from reasoning_rl.rollout import Delta, Request

P = ParamSpec("P")
R = TypeVar("R")


class EngineRanks(Protocol):
    """What ``RemoteEngine`` needs of a ``WorkerGroup``: its generating ranks, called each with its own
    arguments."""

    @property
    def engine_count(self) -> int: ...

    def call_each_engine(
        self, method: Callable[Concatenate[EngineRank, P], R], per_rank: Sequence[RankArgs[P]]
    ) -> list[R]: ...


class RemoteEngine:
    """``ContinuousEngine`` over the generating ranks' ``LiveEngine``s."""

    def __init__(self, ranks: EngineRanks) -> None:
        self.ranks = ranks
        self.count = ranks.engine_count
        self._where: dict[str, int] = {}  # live request id -> its rank
        self._running = 0
        self._sampled = 0

    def submit(self, requests: list[Request]) -> None:
        per_rank: list[list[Request]] = [[] for _ in range(self.count)]
        for r in requests:
            rank = r.group % self.count
            per_rank[rank].append(r)
            self._where[r.id] = rank
        self.ranks.call_each_engine(EngineRank.live_submit, [RankArgs(batch) for batch in per_rank])

    def advance(self) -> list[Delta]:
        """Every rank's deltas since the previous call (paused ranks: one engine step each)."""
        taken = self.ranks.call_each_engine(EngineRank.live_advance, [RankArgs() for _ in range(self.count)])
        self._running = sum(a.running for a in taken)
        self._sampled = sum(a.sampled for a in taken)
        deltas = [d for a in taken for d in a.deltas]
        for d in deltas:
            if d.finished:
                del self._where[d.id]
        return deltas

    def abort(self, ids: list[str]) -> None:
        per_rank: list[list[str]] = [[] for _ in range(self.count)]
        for i in ids:
            per_rank[self._where.pop(i)].append(i)
        self.ranks.call_each_engine(EngineRank.live_abort, [RankArgs(batch) for batch in per_rank])

    def partial(self, ids: list[str]) -> list[Delta]:
        """What these unfinished requests have so far, each asked of its rank (rank order)."""
        per_rank: list[list[str]] = [[] for _ in range(self.count)]
        for i in ids:
            per_rank[self._where[i]].append(i)
        taken = self.ranks.call_each_engine(EngineRank.live_partial, [RankArgs(batch) for batch in per_rank])
        return [d for got in taken for d in got]

    def running(self) -> int:
        """The ranks' running batches at the last ``advance`` (asked right after it: no extra call)."""
        return self._running

    @property
    def sampled(self) -> int:
        """The ranks' sampled tokens at the last ``advance`` (taken with its deltas: no extra call)."""
        return self._sampled

    @property
    def version(self) -> int:
        """The policy version the ranks' engines hold (each rank's own record; they must agree)."""
        return one_version(self._each(EngineRank.engine_version))

    @property
    def sleep_enabled(self) -> bool:
        """Whether the engines give their memory up for the update (the frontier then parks unfinished
        requests instead of keeping them resident)."""
        return any(self._each(EngineRank.engine_sleep_enabled))

    def _each(self, method: Callable[[EngineRank], R]) -> list[R]:
        return self.ranks.call_each_engine(method, [RankArgs() for _ in range(self.count)])
