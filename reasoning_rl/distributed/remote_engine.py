"""``RemoteEngine``: split placement's rollout ranks as one ``ContinuousEngine`` on the driver (issue 31).

The ``Frontier`` drives it exactly as it drives an in-process engine; each call becomes a call on the rollout
ranks' ``LiveEngine`` through the group's typed rank calls (``LiveRank``'s methods). A request goes to rank ``group % R``, so all
samples of a prompt group decode on one rank; ``advance`` gathers every rank's deltas (rank order), each
stamped with the policy version that sampled it (a rank keeps decoding during the update).

Public names (stable): ``RemoteEngine``, ``EngineRanks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from reasoning_rl.distributed.rank import LiveRank, RankArgs, one_version
from reasoning_rl.rollout import Delta, Request

P = ParamSpec("P")
R = TypeVar("R")


class EngineRanks(Protocol):
    """What ``RemoteEngine`` needs of a ``WorkerGroup``: its generating ranks, called each with its own
    arguments."""

    @property
    def engine_count(self) -> int: ...

    def call_live(
        self, method: Callable[Concatenate[LiveRank, P], R], per_rank: Sequence[RankArgs[P]]
    ) -> list[R]: ...


class RemoteEngine:
    """``ContinuousEngine`` over the rollout ranks' ``LiveEngine``s."""

    def __init__(self, ranks: EngineRanks) -> None:
        self.ranks = ranks
        self.count = ranks.engine_count
        self._where: dict[str, int] = {}  # live request id -> its rank
        self._running = 0

    def submit(self, requests: list[Request]) -> None:
        per_rank: list[list[Request]] = [[] for _ in range(self.count)]
        for r in requests:
            rank = r.group % self.count
            per_rank[rank].append(r)
            self._where[r.id] = rank
        self.ranks.call_live(LiveRank.live_submit, [RankArgs(batch) for batch in per_rank])

    def advance(self) -> list[Delta]:
        """Every rank's deltas since the previous call (paused ranks: one engine step each)."""
        taken = self.ranks.call_live(LiveRank.live_advance, [RankArgs() for _ in range(self.count)])
        self._running = sum(a.running for a in taken)
        deltas = [d for a in taken for d in a.deltas]
        for d in deltas:
            if d.finished:
                del self._where[d.id]
        return deltas

    def abort(self, ids: list[str]) -> None:
        per_rank: list[list[str]] = [[] for _ in range(self.count)]
        for i in ids:
            per_rank[self._where.pop(i)].append(i)
        self.ranks.call_live(LiveRank.live_abort, [RankArgs(batch) for batch in per_rank])

    def running(self) -> int:
        """The ranks' running batches at the last ``advance`` (asked right after it: no extra call)."""
        return self._running

    @property
    def version(self) -> int:
        """The policy version the rollout ranks' engines hold (each rank's own record; they must agree)."""
        return one_version(
            self.ranks.call_live(LiveRank.live_version, [RankArgs() for _ in range(self.count)])
        )
