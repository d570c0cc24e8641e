"""``WorkerGroup``: the driver's handle on every rank. One method call becomes the same call on every rank, with
data split by rank (data parallel) and the results gathered back in the original order.

Splits are contiguous and deterministic (``shards``): rank r gets rows ``[start_r, stop_r)``, the first
``n % world`` ranks one row more, so gathering is concatenation. Two backends run the calls: ``LocalRanks`` (one
``ModelWorker`` called directly in this process: the single-rank path, no Ray) and the Ray actors of
``reasoning_rl.distributed.launch``. A call names its method by reference, typed (``rank``), e.g.
``group.call(ModelWorker.sft_eval, [RankArgs(batch), ...])``. ``views`` presents a group as the model and
engine interfaces the step uses (``Models(policy, ref, critic)``, ``RolloutEngine``), so the algorithm code never
sees ranks.

Public names (stable): ``WorkerGroup`` (``local``, ``world``, ``shards``, ``call``, ``call_all``, ``stream``,
``call_engines``, ``call_each_engine``, ``continuous_engine``, ``push_weights``, ``take_traffic``, ``close``),
``RankBackend``, ``LocalRanks``, ``Traffic``, ``shards``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from reasoning_rl.distributed.rank import EngineRank, RankArgs, apply, method_name
from reasoning_rl.distributed.remote_engine import RemoteEngine
from reasoning_rl.distributed.worker import CallResult, ModelWorker
from reasoning_rl.handoff import HandoffStats
from reasoning_rl.rollout import Completion, ContinuousEngine, SamplingConfig
from reasoning_rl.trace import Progress

P = ParamSpec("P")
R = TypeVar("R")


def shards(n: int, world: int) -> list[range]:
    """Contiguous row ranges, one per rank, sizes differing by at most one (earlier ranks larger)."""
    base, extra = divmod(n, world)
    out, start = [], 0
    for r in range(world):
        stop = start + base + (1 if r < extra else 0)
        out.append(range(start, stop))
        start = stop
    return out


@dataclass
class Traffic:
    """Driver <-> worker data of the calls since the last ``take_traffic``: bytes each way, and per (method,
    rank) the seconds spent on the worker. Empty for the in-process backend (nothing is sent)."""

    to_workers: int = 0
    from_workers: int = 0
    seconds: dict[tuple[str, int], float] = field(default_factory=dict)

    def add(self, method: str, rank: int, sent: int, result: CallResult) -> None:
        self.to_workers += sent
        self.from_workers += result.nbytes
        key = (method, rank)
        self.seconds[key] = self.seconds.get(key, 0.0) + result.seconds


class RankBackend(Protocol):
    """How a group's calls reach its ranks."""

    @property
    def world(self) -> int: ...

    @property
    def engine_count(self) -> int:
        """Ranks that generate: the training ranks, or split placement's rollout ranks."""
        ...

    def run_engines(
        self,
        method: Callable[Concatenate[EngineRank, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
    ) -> list[R]:
        """``method(*per_rank[r])`` on every generating rank r (the group asks for ``live_*`` ones only of ranks
        whose engines are continuous)."""
        ...

    def handoff(self, version: int, bucket_bytes: int, traffic: Traffic) -> list[HandoffStats]:
        """The policy's new weights (policy ``version``) into every engine; each rank's ``HandoffStats``
        (training ranks first)."""
        ...

    def run(
        self,
        method: Callable[Concatenate[ModelWorker, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
        progress: Progress | None = None,
    ) -> list[R]:
        """``method(*per_rank[r])`` on every rank r at once; the values in rank order. ``progress``: passed to
        rank 0's call as its ``progress`` keyword by a backend whose rank 0 runs in this process; Ray ranks
        cannot call back into the driver and go without it."""
        ...

    def close(self) -> None: ...


class LocalRanks:
    """One ``ModelWorker`` in this process, called directly."""

    def __init__(self, worker: ModelWorker) -> None:
        self.worker = worker

    @property
    def world(self) -> int:
        return 1

    @property
    def engine_count(self) -> int:
        return 1

    def run_engines(
        self,
        method: Callable[Concatenate[EngineRank, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
    ) -> list[R]:
        return self._apply(method, per_rank, None)

    def handoff(self, version: int, bucket_bytes: int, traffic: Traffic) -> list[HandoffStats]:
        return [self.worker.push_weights(version, bucket_bytes)]

    def run(
        self,
        method: Callable[Concatenate[ModelWorker, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
        progress: Progress | None = None,
    ) -> list[R]:
        return self._apply(method, per_rank, progress)

    def _apply(
        self, method: Callable[..., R], per_rank: Sequence[RankArgs[...]], progress: Progress | None
    ) -> list[R]:
        (args,) = per_rank
        if progress is not None:
            args = RankArgs(*args.args, **args.kwargs, progress=progress)
        return [apply(self.worker, method, args)]

    def close(self) -> None:
        self.worker.close()


class WorkerGroup:
    """All ranks of a run. ``call`` sends each rank its own arguments; ``call_all`` the same ones to all."""

    def __init__(self, backend: RankBackend) -> None:
        self.backend = backend
        self.traffic = Traffic()

    @classmethod
    def local(cls, worker: ModelWorker) -> WorkerGroup:
        return cls(LocalRanks(worker))

    @property
    def world(self) -> int:
        return self.backend.world

    def shards(self, n: int) -> list[range]:
        """This group's split of ``n`` rows; refuses a batch that leaves a rank without rows (every rank
        must join the collective passes with at least one)."""
        if n < self.world:
            raise ValueError(
                f"a batch of {n} rows cannot be split over {self.world} ranks (each needs at least one); "
                "raise trainer.batch_size x rollout.n (and algorithm.mini_batch_size) to at least the rank count"
            )
        return shards(n, self.world)

    def call(
        self,
        method: Callable[Concatenate[ModelWorker, P], R],
        per_rank: Sequence[RankArgs[P]],
        *,
        progress: Progress | None = None,
    ) -> list[R]:
        """``method(*per_rank[r])`` on training rank r, the values in rank order. ``progress``: rank 0's
        progress inside the call (``RankBackend.run``), e.g. a train step's micro-batches."""
        if len(per_rank) != self.world:
            raise ValueError(f"{method_name(method)}: {len(per_rank)} argument sets for {self.world} ranks")
        return self.backend.run(method, per_rank, self.traffic, progress)

    def call_all(
        self, method: Callable[Concatenate[ModelWorker, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> list[R]:
        """The same call on every training rank."""
        return self.call(method, [RankArgs(*args, **kwargs)] * self.world)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        """Completions of ``prompts`` (a stepped engine's step, eval over ranks), numbered as in ``prompts`` and
        ordered by (prompt, sample). In this process: the engine's own ``generate``. Over Ray ranks each
        generates its share (with its share's offset, so per-prompt seeds do not depend on the split); ranks
        without prompts answer at once."""
        if isinstance(self.backend, LocalRanks):
            engine = self.backend.worker.engine
            if engine is None:
                raise RuntimeError("this run's rank has no rollout engine")
            return engine.generate(prompts, sampling)
        split = shards(len(prompts), self.backend.engine_count)
        done_by_rank = self.call_each_engine(
            EngineRank.generate, [RankArgs(prompts[s.start : s.stop], _share(sampling, s)) for s in split]
        )
        out = [
            replace(comp, prompt_index=comp.prompt_index + s.start)
            for s, done in zip(split, done_by_rank, strict=True)
            for comp in done
        ]
        return sorted(out, key=lambda c: (c.prompt_index, c.sample_index))

    @property
    def engine_count(self) -> int:
        """Ranks that generate (split placement: the rollout ranks)."""
        return self.backend.engine_count

    def call_engines(
        self, method: Callable[Concatenate[EngineRank, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> list[R]:
        """The same call on every generating rank (split placement: the rollout ranks)."""
        return self.call_each_engine(method, [RankArgs(*args, **kwargs)] * self.backend.engine_count)

    def call_each_engine(
        self, method: Callable[Concatenate[EngineRank, P], R], per_rank: Sequence[RankArgs[P]]
    ) -> list[R]:
        """``method(*per_rank[r])`` on generating rank r (e.g. ``RemoteEngine``'s ``live_*`` calls, built by
        ``continuous_engine`` only over ranks whose engines are continuous)."""
        if len(per_rank) != self.backend.engine_count:
            raise ValueError(
                f"{method_name(method)}: {len(per_rank)} argument sets for {self.backend.engine_count} engines"
            )
        return self.backend.run_engines(method, per_rank, self.traffic)

    def continuous_engine(self) -> ContinuousEngine | None:
        """The engine the ``Frontier`` drives (every step, at any ``rollout.max_lag``): an in-process rank's own,
        or the generating Ray ranks (colocated training ranks or split rollout ranks) as one ``RemoteEngine``.
        None: a plugin engine that only streams (the run then takes waves of ``generate``)."""
        if isinstance(self.backend, LocalRanks):
            engine = self.backend.worker.engine
            return engine if isinstance(engine, ContinuousEngine) else None
        return RemoteEngine(self) if all(self.call_engines(EngineRank.continuous)) else None

    def push_weights(self, version: int, bucket_bytes: int) -> list[HandoffStats]:
        """The update's weights (policy ``version``, which every engine records) into every engine: per rank
        ``HandoffStats``, training ranks first."""
        return self.backend.handoff(version, bucket_bytes, self.traffic)

    def take_traffic(self) -> Traffic:
        out, self.traffic = self.traffic, Traffic()
        return out

    def close(self) -> None:
        self.backend.close()


def _share(sampling: SamplingConfig, s: range) -> SamplingConfig:
    """The request for prompts ``s`` of a split batch: their offset and their own per-prompt seeds."""
    seeds = sampling.prompt_seeds[s.start : s.stop] if sampling.prompt_seeds is not None else None
    return sampling.model_copy(
        update={"prompt_offset": sampling.prompt_offset + s.start, "prompt_seeds": seeds}
    )
