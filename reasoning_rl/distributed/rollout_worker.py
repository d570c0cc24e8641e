"""``RolloutWorker``: a split-placement rollout rank (``resources.placement=split``): a rollout engine and no
policy shard. It generates its share of the prompts and, after each update, loads the weights training rank 0
broadcasts (``broadcast.receive_weights``), proving them with the freshness gate when it is on.

It answers the engine-side calls ``ModelWorker`` answers (``generate``, ``stream``, ``engine_*``, ``stats``), so
the driver's group sends generation to either kind the same way.

Public names (stable): ``RolloutWorker`` (``build``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from reasoning_rl.distributed.broadcast import HandoffGroup, receive_weights
from reasoning_rl.distributed.worker import WorkerSpec, node_address
from reasoning_rl.factory import engine_for
from reasoning_rl.rollout import Completion, RolloutEngine, SamplingConfig


class RolloutWorker:
    """One rollout rank's engine and its end of the hand-off group."""

    def __init__(
        self, engine: RolloutEngine, handoff: HandoffGroup, *, gate: Any = None, rank: int = 0
    ) -> None:
        self.engine = engine
        self.handoff = handoff
        self.gate = gate  # FreshnessGate over this rank's engine (rollout.freshness_check)
        self.rank = rank

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
        return cls(engine, handoff, gate=gate, rank=rank)

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        return self.engine.generate(prompts, sampling)

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        return self.engine.stream(prompts, sampling)

    def engine_sleep(self, keep_weights: bool) -> None:
        return None  # nothing else lives on this device: the engine stays up between steps

    def engine_wake(self) -> None:
        self.engine.wake()

    def engine_asleep(self) -> bool:
        return bool(self.engine.asleep)

    def receive_weights(self, step: int) -> Any:
        """The weights of the update just done (``HandoffStats``; with the gate, its check)."""
        return receive_weights(self.engine, self.handoff, gate=self.gate, step=step)

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
