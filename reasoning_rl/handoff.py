"""Weight hand-off: stream the trainer's (possibly FSDP2-sharded) weights into the rollout engine.

Every rank walks ``Policy.iter_full_params`` in lockstep (each bucket is an all-gather); a rank that
holds an engine (rank 0, or every rank when each runs its own vLLM for data-parallel rollout) feeds
the buckets lazily into ``engine.load_weights``; the others drop them. At most one bucket of full
tensors exists per rank at any time, never a second full model. With a ``FreshnessGate`` each tensor is
fingerprinted as it streams past and the engine is verified after loading (``reasoning_rl.freshness``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from reasoning_rl import dist
from reasoning_rl.faults import fault_point
from reasoning_rl.freshness import CheckResult, FreshnessGate
from reasoning_rl.rollout.fingerprints import SentFingerprints

if TYPE_CHECKING:
    from reasoning_rl.policy.policy import Policy
    from reasoning_rl.rollout.base import RolloutEngine


@dataclass
class HandoffStats:
    """One hand-off: bytes of full tensors pushed, wall time of the load (the check reports its own), tensor
    count, the gate's result; split placement's live rollout ranks add the tokens they decoded between the
    driver's last advance and the swap (``overlap_tokens``: generation overlapped with the update)."""

    bytes: int
    seconds: float
    tensors: int
    check: CheckResult | None = field(default=None)
    overlap_tokens: int | None = None

    @property
    def gbps(self) -> float:
        """Throughput in GB/s (10^9 bytes per second)."""
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else float("inf")

    def as_metrics(self, prefix: str = "handoff/") -> dict[str, float]:
        out = {
            f"{prefix}bytes": float(self.bytes),
            f"{prefix}seconds": self.seconds,
            f"{prefix}tensors": float(self.tensors),
            f"{prefix}gbps": self.gbps,
        }
        return out if self.check is None else {**out, **self.check.as_metrics(prefix)}


class Tally:
    """Counts the tensors streamed into an engine and, for a gate, fingerprints each as it passes, so the stats
    and the freshness check describe exactly what was loaded (both hand-off paths: here and split placement)."""

    def __init__(self, gate: FreshnessGate | None, *, exact: bool = False) -> None:
        """``exact``: fingerprint in the sent dtype (LoRA adapters, which an engine keeps as sent) rather than
        in the engine's."""
        self.bytes = 0
        self.tensors = 0
        self.sent = SentFingerprints(None if exact else gate.engine_dtype) if gate is not None else None

    def count(self, named: Iterable[tuple[str, Tensor]]) -> Iterator[tuple[str, Tensor]]:
        for name, tensor in named:
            self.bytes += tensor.numel() * tensor.element_size()
            self.tensors += 1
            if self.tensors == 2:
                fault_point("handoff")  # the first tensor is in the engine: a crash test's mid-hand-off
            if self.sent is not None:
                self.sent.observe(name, tensor)
            yield name, tensor

    def stats(self, seconds: float, check: CheckResult | None) -> HandoffStats:
        return HandoffStats(bytes=self.bytes, seconds=seconds, tensors=self.tensors, check=check)


def load_all(engine: RolloutEngine, tensors: Iterator[tuple[str, Tensor]], *, version: int) -> None:
    """``engine.load_weights`` on the stream (policy ``version``), then drain what it left: the stream's
    collectives (all-gathers, broadcasts) must complete on this rank as on its peers even when the engine stops
    early."""
    engine.load_weights(tensors, version=version)
    for _ in tensors:
        pass


def push_weights(
    policy: Policy,
    engine: RolloutEngine | None,
    *,
    version: int,
    bucket_bytes: int = 256 << 20,
    gate: FreshnessGate | None = None,
    dtype: torch.dtype | None = None,
) -> HandoffStats:
    """Copy the policy's current weights into this rank's ``engine`` (None on ranks without one;
    rank 0 must have one), then, with a ``gate``, prove the engine holds them (``WeightSyncError`` if not).
    ``version``: the policy version they are (the updates behind them), which the engine records and reports.
    ``dtype``: the engine's; each full tensor is cast to it where it was gathered, before it streams (fp32
    masters into a bf16 engine: half the bytes; the engine would round them the same way).

    Collective: call on every training rank. Returns this rank's stats (same on all ranks).
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1; got {bucket_bytes}")
    if dist.is_main() and engine is None:
        raise ValueError("push_weights: rank 0 needs the rollout engine (got None)")
    tally = Tally(gate)
    start = time.perf_counter()
    tensors = tally.count(
        (name, tensor) for bucket in policy.iter_full_params(bucket_bytes, dtype) for name, tensor in bucket
    )
    if engine is not None:
        load_all(engine, tensors, version=version)  # stopping early must not leave other ranks mid-gather
    else:
        for _ in tensors:
            pass
    dist.barrier()
    seconds = time.perf_counter() - start
    check = (
        None
        if gate is None or tally.sent is None
        else gate.check(policy, engine, tally.sent.result(), step=version)
    )
    return tally.stats(seconds, check)
