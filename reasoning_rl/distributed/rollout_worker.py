"""``RolloutWorker``: a split-placement rollout rank (``resources.placement=split``): a rollout engine and no
policy shard. It generates its share of the prompts and, after each update, loads the weights training rank 0
broadcasts (``broadcast.receive_weights``), proving them with the freshness gate when it is on.

It answers the engine-side calls ``ModelWorker`` answers (``EngineRank``: ``stream``, ``engine_*``, ``live``), so
the driver's group sends generation to either kind the same way. With continuous rollouts (``rollout.max_lag >
0``) its engine is a ``LiveEngine`` the driver's ``RemoteEngine`` reaches through ``live_submit`` /
``live_advance`` / ``live_abort``; the weights then arrive while it keeps decoding and are swapped in between
two decode steps.

Public names (stable): ``RolloutWorker`` (``build``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from reasoning_rl.distributed.broadcast import HandoffGroup, receive_weights
from reasoning_rl.distributed.live_engine import Advanced, LiveEngine
from reasoning_rl.distributed.rank import LiveRank
from reasoning_rl.distributed.worker import WorkerSpec, node_address
from reasoning_rl.factory import engine_for
from reasoning_rl.handoff import HandoffStats
from reasoning_rl.rollout import Completion, ContinuousEngine, Request, RolloutEngine, SamplingConfig


class RolloutWorker(LiveRank):
    """One rollout rank's engine and its end of the hand-off group."""

    def __init__(
        self,
        engine: RolloutEngine,
        handoff: HandoffGroup,
        *,
        gate: Any = None,
        rank: int = 0,
        live: LiveEngine | None = None,
    ) -> None:
        self.engine = engine
        self.handoff = handoff
        self.gate = gate  # FreshnessGate over this rank's engine (rollout.freshness_check)
        self.rank = rank
        self.live_engine = live  # continuous rollouts: the engine behind its lock (and decode thread)

    @classmethod
    def build(cls, spec: WorkerSpec, handoff: HandoffGroup, *, rank: int) -> RolloutWorker:
        from reasoning_rl.freshness import FreshnessGate

        cfg = spec.cfg
        engine = engine_for(cfg, spec.model_dir, spec.device, spec.max_model_len, dtype=spec.dtype)
        gate = (
            FreshnessGate.for_run(
                engine, [list(p) for p in spec.probe_prompts], cfg.rollout.freshness_probe_tol
            )
            if cfg.rollout.freshness_check
            else None
        )
        # an engine that only streams stays not live: the driver then refuses rollout.max_lag > 0 in one line
        # (a refusal raised here would reach the user as a rank failure)
        live = (
            LiveEngine(engine, overlap=cfg.rollout.overlap)
            if cfg.rollout.max_lag > 0 and isinstance(engine, ContinuousEngine)
            else None
        )
        return cls(engine, handoff, gate=gate, rank=rank, live=live)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        if self.live_engine is None:
            return self.engine.generate(prompts, sampling)
        with self.live_engine.exclusive():
            return self.engine.generate(prompts, sampling)

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        if self.live_engine is None:
            return self.engine.stream(prompts, sampling)
        return self._stream_beside_live(self.live_engine, prompts, sampling)

    def _stream_beside_live(
        self, live: LiveEngine, prompts: list[list[int]], sampling: SamplingConfig
    ) -> Iterator[Completion]:
        """A stream (eval) under the engine lock: the decode thread waits; the resident requests' outputs
        of these steps are held for its next step."""
        with live.exclusive():
            yield from self.engine.stream(prompts, sampling)

    # ----------------------------------------------------------------- continuous rollouts (RemoteEngine)
    def live(self) -> bool:
        return self.live_engine is not None

    def live_submit(self, requests: list[Request]) -> None:
        self._live().submit(requests)

    def live_advance(self) -> Advanced:
        return self._live().advance()

    def live_abort(self, ids: list[str]) -> None:
        self._live().abort(ids)

    def live_version(self) -> int:
        return self._live().version

    def _live(self) -> LiveEngine:
        if self.live_engine is None:
            raise RuntimeError("continuous rollout calls on a rollout rank built with rollout.max_lag=0")
        return self.live_engine

    def engine_sleep(self, keep_weights: bool) -> None:
        return None  # nothing else lives on this device: the engine stays up between steps

    def engine_wake(self) -> None:
        self.engine.wake()

    def engine_asleep(self) -> bool:
        return bool(self.engine.asleep)

    def engine_version(self) -> int:
        return self.engine.version

    def receive_weights(self, version: int) -> HandoffStats:
        """The weights of the update just done, policy ``version`` (``HandoffStats``; with the gate, its check).
        A live engine keeps decoding while they arrive, then swaps them in and reports what it decoded during
        the update."""
        if self.live_engine is None:
            return receive_weights(self.engine, self.handoff, version=version, gate=self.gate)
        swap = self.live_engine.swap
        stats = receive_weights(self.engine, self.handoff, version=version, gate=self.gate, swap=swap)
        return replace(stats, overlap_tokens=self.live_engine.overlapped)

    def stats(self) -> dict[str, Any]:
        import os
        import resource
        import time

        return {
            "rank": self.rank,
            "node": node_address(),
            "pid": os.getpid(),
            "rss_peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "time": time.time(),
        }
