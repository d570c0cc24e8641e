"""The per-engine-step cost curve (issue 44): what one engine step costs at each running batch.

Continuous rollouts hold a bigger running batch than sync and still generated fewer tokens/s on one H200, so the
question is what a step costs as the batch grows: a fixed cost per step, one per request, or both. The frontier
adds every engine step here (its wall time, the time inside ``engine.advance()``, its running batch and the tokens
it sampled), summed into fixed running-batch buckets ``WIDTH`` requests wide (the last one open: at or above the
target running batch), and writes the step's non-empty buckets to the trace as ``engine_steps`` counters (value:
engine steps; attrs ``lo``, ``hi`` (None: open), ``requests`` (Σ running batch), ``seconds``, ``engine_s``,
``tokens``). ``pooled`` sums those counters over steps again for ``rrl report`` and the GPU bench: per bucket,
ms per engine step and us per request-step (``seconds / requests``) are the curve.

A step's running batch is the larger of ``engine.running()`` just before and just after ``advance``: vLLM schedules
newly submitted requests inside the step (not yet running before it) and drops finished ones at its end (no longer
running after it), so neither count alone is the batch it ran; the larger misses only min(admitted, finished), a
request or two of hundreds. Its wall time is the frontier's whole round (the step, taking its outputs, admission);
``engine_s`` is the part inside ``advance``. On split placement with overlap a driver ``advance`` takes what the
ranks' decode threads stepped meanwhile, so there a "step" is the driver's round, not one engine step.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Any

from reasoning_rl.trace import TraceWriter

WIDTH = 32  # requests per bucket: the same edges for every run, so sync and continuous curves line up
COUNTER = "engine_steps"  # the trace counter, one per non-empty bucket and training step


@dataclass
class Bucket:
    """One running-batch bucket's sums: engine steps at ``lo <= running < hi`` (``hi`` None: no upper edge)."""

    lo: int
    hi: int | None
    steps: int = 0
    requests: int = 0  # Σ running batch over its steps: request-steps
    seconds: float = (
        0.0  # Σ wall time of the frontier's loop round (the engine step, taking its outputs, admission)
    )
    engine_s: float = 0.0  # Σ time inside engine.advance() alone
    tokens: int = 0  # Σ tokens the engine sampled in its steps

    @property
    def ms_per_step(self) -> float:
        return 1e3 * self.seconds / self.steps if self.steps else float("nan")

    @property
    def us_per_request(self) -> float:
        """Wall time per request-step: flat here means a per-request cost, falling means a per-step one."""
        return 1e6 * self.seconds / self.requests if self.requests else float("nan")

    @property
    def engine_share(self) -> float:
        """The share of the round spent inside ``advance`` (the rest is the frontier's own bookkeeping)."""
        return self.engine_s / self.seconds if self.seconds > 0 else float("nan")

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


class StepCost:
    """The accumulator: ``add`` per engine step (five attribute adds on its bucket, nothing allocated),
    ``flush`` per training step (the trace counters, then fresh buckets)."""

    def __init__(self, target: int, width: int = WIDTH) -> None:
        if width < 1:
            raise ValueError(f"bucket width must be >= 1, got {width}")
        self.width = width
        self.top = -(-max(target, 1) // width)  # the open bucket: running >= the target rounded up to a width
        self._sums = self._empty()

    def _empty(self) -> list[Bucket]:
        return [
            Bucket(i * self.width, None if i == self.top else (i + 1) * self.width)
            for i in range(self.top + 1)
        ]

    def add(self, running: int, seconds: float, engine_s: float, tokens: int) -> None:
        """One engine step: its running batch, its round's wall time, the time inside ``advance``, its tokens."""
        b = self._sums[min(running // self.width, self.top)]
        b.steps += 1
        b.requests += running
        b.seconds += seconds
        b.engine_s += engine_s
        b.tokens += tokens

    def buckets(self) -> list[Bucket]:
        """The non-empty buckets so far (copies), smallest running batch first."""
        return [replace(b) for b in self._sums if b.steps]

    def flush(self, trace: TraceWriter, step: int) -> dict[str, float]:
        """Write the buckets as ``step``'s ``engine_steps`` counters and start fresh ones; the metrics line's
        summary: ``rollout/engine_steps`` and ``rollout/engine_step_ms`` (mean wall time of a step's round)."""
        out = [b for b in self._sums if b.steps]
        self._sums = self._empty()
        for b in out:
            trace.counter(
                COUNTER,
                step,
                b.steps,
                lo=b.lo,
                hi=b.hi,
                requests=b.requests,
                seconds=b.seconds,
                engine_s=b.engine_s,
                tokens=b.tokens,
            )
        steps, seconds = sum(b.steps for b in out), sum(b.seconds for b in out)
        return {
            "rollout/engine_steps": float(steps),
            "rollout/engine_step_ms": 1e3 * seconds / steps if steps else 0.0,
        }


def pooled(counters: Iterable[dict[str, Any]], steps: Collection[int] | None = None) -> list[Bucket]:
    """The ``engine_steps`` counters of a trace summed per bucket over its training steps (``steps``: only
    those, e.g. without a warm-up step), smallest running batch first."""
    out: dict[tuple[int, int | None], Bucket] = {}
    for c in counters:
        if c.get("name") != COUNTER or (steps is not None and c.get("step") not in steps):
            continue
        a = c.get("attrs", {})
        hi = None if a.get("hi") is None else int(a["hi"])
        b = out.setdefault((int(a["lo"]), hi), Bucket(int(a["lo"]), hi))
        b.steps += int(c["value"])
        b.requests += int(a["requests"])
        b.seconds += float(a["seconds"])
        b.engine_s += float(a["engine_s"])
        b.tokens += int(a["tokens"])
    return [out[k] for k in sorted(out, key=lambda k: k[0])]


def curve_lines(buckets: list[Bucket]) -> list[str]:
    """The curve as text: one line per bucket (the GPU bench's summary)."""
    lines = ["running batch   steps   ms/step  us/req-step  in advance   tokens/s"]
    for b in buckets:
        span = f"{b.lo}-{b.hi - 1}" if b.hi is not None else f">={b.lo}"
        lines.append(
            f"{span:<13} {b.steps:>7} {b.ms_per_step:>9.2f} {b.us_per_request:>12.1f}"
            f" {100 * b.engine_share:>10.0f}% {b.tokens_per_s:>10.0f}"
        )
    return lines
