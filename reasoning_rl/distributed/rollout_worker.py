"""``RolloutWorker``: a split-placement rollout rank (``resources.placement=split``): a rollout engine and no
policy shard. It generates its share of the prompts and, after each update, loads the weights training rank 0
broadcasts (``broadcast.receive_weights``), proving them with the freshness gate when it is on.

It answers the engine-side calls ``ModelWorker`` answers (``EngineRank``: ``generate``, ``engine_*``,
``continuous``, ``live_*``), so the driver's group sends generation to either kind the same way. Its engine is a
``LiveEngine`` the driver's ``RemoteEngine`` reaches through ``live_submit`` / ``live_advance`` / ``live_abort``
(``live_partial`` for a park or a checkpoint) at every ``rollout.max_lag``; with continuous rollouts (``max_lag > 0``, ``rollout.overlap``) it decodes on its
own, the weights arrive while it keeps decoding and are swapped in between two decode steps.

Public names (stable): ``RolloutWorker`` (``build``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from reasoning_rl.distributed.broadcast import HandoffGroup, receive_weights
from reasoning_rl.distributed.live_engine import LiveCalls, LiveEngine
from reasoning_rl.distributed.rank import EngineRank
from reasoning_rl.distributed.worker import WorkerSpec, node_address
from reasoning_rl.factory import engine_for
from reasoning_rl.handoff import HandoffStats
from reasoning_rl.rollout import ContinuousEngine, RolloutEngine


class RolloutWorker(LiveCalls, EngineRank):
    """One rollout rank's engine and its end of the hand-off group."""

    def __init__(
        self,
        engine: RolloutEngine,
        handoff: HandoffGroup,
        *,
        gate: Any = None,
        rank: int = 0,
        live: LiveEngine | None = None,
        resident: bool = False,
    ) -> None:
        self.engine = engine
        self.handoff = handoff
        self.gate = gate  # FreshnessGate over this rank's engine (rollout.freshness_check)
        self.rank = rank
        self.live_engine = live  # the engine behind its lock (continuous rollouts: and its decode thread)
        # rollout.max_lag > 0: requests stay in the engine across the update, the weights swap in under its lock
        self.resident = resident and live is not None

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
        # an engine that only streams stays not live: the driver then takes waves of ``generate`` at max_lag 0
        # and refuses rollout.max_lag > 0 in one line (a refusal raised here would reach the user as a rank failure)
        overlap = cfg.rollout.overlap and cfg.rollout.max_lag > 0  # synchronous: stepped by the driver only
        live = LiveEngine(engine, overlap=overlap) if isinstance(engine, ContinuousEngine) else None
        return cls(engine, handoff, gate=gate, rank=rank, live=live, resident=cfg.rollout.max_lag > 0)

    def _engine(self) -> RolloutEngine:
        return self.engine

    def engine_sleep(self, keep_weights: bool) -> None:
        return None  # nothing else lives on this device: the engine stays up between steps

    def engine_wake(self) -> None:
        self.engine.wake()

    def engine_asleep(self) -> bool:
        return bool(self.engine.asleep)

    def engine_sleep_enabled(self) -> bool:
        return False  # engine_sleep keeps it up: resident requests stay across the update

    def engine_version(self) -> int:
        return self.engine.version

    def receive_weights(self, version: int) -> HandoffStats:
        """The weights of the update just done, policy ``version`` (``HandoffStats``; with the gate, its check).
        With resident requests the engine keeps decoding while they arrive, then swaps them in and reports what
        it decoded during the update (else nothing is in it: they stream straight into the engine)."""
        if self.live_engine is None or not self.resident:
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
