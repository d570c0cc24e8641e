"""Freshness gate: after every weight hand-off, prove that the rollout engine serves the trainer's weights.

Two independent checks, both cheap next to a training step:

1. Fingerprints. Per tensor, float64 reductions of what the trainer sent (computed in the hand-off stream,
   on the device where the gathered tensor already is) against the same numbers read back from the engine's
   model after loading: the sum, the sum of squares and the L1 norm, and two order-sensitive sums, each row's
   sum weighted by its row index and each column's by its column index (so permuted rows or columns fail).
   All of them compose over concatenation along the first dimension, so a fused engine parameter (vLLM's
   ``qkv_proj`` = q/k/v, ``gate_up_proj`` = gate/up) is compared with its pieces combined in the engine's
   order, and zero padding rows (vLLM pads the vocabulary) change nothing. Every engine parameter must be
   covered by the hand-off: one the trainer never sends would keep serving stale values. The sent side is fingerprinted in the ENGINE's dtype
   (each tensor cast as the engine's loader casts it: round to nearest), so the comparison is exact up to
   float64 summation order even for an fp32 trainer feeding a bf16 engine: any element whose rounded value
   changed is seen. Where a held tensor's dtype still differs, the tolerance is the rounding bound of the cast.
2. A probe. A few fixed sequences (chosen at run start) are scored by the engine (prompt log-probs, no
   sampling) and by the trainer; the mean per-token |difference| must stay within ``PROBE_TOL[dtype]``.
3. A generation probe. Prompt log-probs never read the prefix cache, so the probe above cannot see stale
   cached KV; a fixed context of more than one KV block is generated from greedily (the path every rollout
   and eval takes, prefix cache included) and the engine's log-probs of the generated tokens must match its own
   scoring of the same sequence (checked against the trainer by the probe) within the same tolerance. The
   context is the same at every hand-off, so its blocks from the previous one are there to be (wrongly) hit.

A failure raises ``WeightSyncError`` naming the first bad tensor or the probe gap, on every rank (the
check is collective like the hand-off: each engine-holding rank checks its own engine).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

import torch
from torch import Tensor

from reasoning_rl import dist
from reasoning_rl.rollout.adapters import AdapterEngine
from reasoning_rl.rollout.base import Completion, RolloutError, SamplingConfig
from reasoning_rl.rollout.fingerprints import EngineWeights, Fingerprint, compare_fingerprints

if TYPE_CHECKING:
    from reasoning_rl.policy.batch import TokenBatch
    from reasoning_rl.policy.policy import Policy

# Mean |log p_engine - log p_trainer| per probe token allowed for the engine's dtype: a few x the spread that
# kernel differences give at that precision (fp32: measured <= 1e-4 between vLLM CPU and the trainer).
PROBE_TOL: dict[torch.dtype, float] = {torch.float32: 5e-3, torch.float16: 5e-2, torch.bfloat16: 1e-1}
GENERATION_CONTEXT = 160  # tokens of the generation probe's context: over one KV block (CPU 128, GPU 16)
# tokens it generates: the first comes out of the prefill over the (possibly cached) context, the second out of a
# decode step attending to it; each further one is another engine step of the hand-off's critical path
GENERATION_TOKENS = 2


class WeightSyncError(RuntimeError):
    """The engine does not serve the weights the trainer just sent (dropped/renamed/stale tensor, probe gap)."""


@runtime_checkable
class InspectableEngine(Protocol):
    """What the gate needs from a rollout engine besides ``load_weights``."""

    max_model_len: int

    def weight_fingerprints(self) -> EngineWeights: ...

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]: ...

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]: ...


@dataclass
class Probe:
    """Fixed sequences scored after each hand-off: ``prompt_lens[i]`` tokens of context, the rest scored;
    ``context``: what the generation probe generates from (the prompts end to end, repeated to
    ``GENERATION_CONTEXT`` tokens)."""

    sequences: list[list[int]]
    prompt_lens: list[int]
    context: list[int]

    @classmethod
    def from_prompts(cls, prompts: list[list[int]], count: int = 2, max_tokens: int = 48) -> Probe:
        """The first ``count`` prompts (at most ``max_tokens`` tokens each), the second half of each scored:
        real text in the run's own template, fixed at run start, no sampling involved."""
        seqs = [list(p[-max_tokens:]) for p in prompts if len(p) >= 2][:count]
        if not seqs:
            raise ValueError("the freshness probe needs at least one prompt of >= 2 tokens")
        joined = [t for s in seqs for t in s]
        context = (joined * (GENERATION_CONTEXT // len(joined) + 1))[:GENERATION_CONTEXT]
        return cls(seqs, [max(1, len(s) // 2) for s in seqs], context)

    def generation_gap(self, engine: InspectableEngine) -> tuple[float, float]:
        """Mean and max |difference| per generated token between ``engine``'s log-probs of its greedy tokens
        after ``context`` (generation path: prefix cache) and its scoring of the same sequence (none)."""
        context = self.context[-(engine.max_model_len - GENERATION_TOKENS - 1) :]
        greedy = SamplingConfig(temperature=0.0, max_tokens=GENERATION_TOKENS, logprobs=True)
        (done,) = engine.generate([context], greedy)
        if not done.token_ids:
            return 0.0, 0.0
        (scored,) = engine.score([context + done.token_ids], [len(context)])
        diffs = [abs(a - b) for a, b in zip(done.logprobs, scored, strict=True)]
        return sum(diffs) / len(diffs), max(diffs)

    def batch(self) -> TokenBatch:
        from reasoning_rl.policy.batch import TokenBatch

        return TokenBatch([torch.tensor(s) for s in self.sequences], list(self.prompt_lens))


@dataclass
class CheckResult:
    """One gate pass: probe gap (mean and max |delta log p| per token), its tolerance, the check's seconds,
    and the generation probe's mean gap."""

    probe_gap: float
    probe_gap_max: float
    probe_tol: float
    seconds: float
    tensors_checked: int
    generation_gap: float = 0.0

    def as_metrics(self, prefix: str = "handoff/") -> dict[str, float]:
        return {
            f"{prefix}probe_gap": self.probe_gap,
            f"{prefix}probe_gap_max": self.probe_gap_max,
            f"{prefix}generation_gap": self.generation_gap,
            f"{prefix}probe_tol": self.probe_tol,
            f"{prefix}check_seconds": self.seconds,
        }


class FreshnessGate:
    """Verifies one hand-off: fingerprints, then the probe. Collective (call on every training rank)."""

    def __init__(
        self, probe: Probe, *, probe_tol: float | None = None, engine_dtype: torch.dtype | None = None
    ) -> None:
        self.probe = probe
        self.probe_tol = probe_tol
        self.engine_dtype = engine_dtype  # the sent side is fingerprinted in it (learned from each read-back)

    @classmethod
    def for_run(cls, engine: Any, prompts: list[list[int]], probe_tol: float | None) -> FreshnessGate:
        """The gate of a run (probe = its first prompts); a clear config error for an engine it cannot read."""
        from reasoning_rl.config import ConfigError

        if engine is None:  # a rank without an engine: it joins the probe forward and the vote only
            return cls(Probe.from_prompts(prompts), probe_tol=probe_tol)
        if not isinstance(engine, InspectableEngine):
            raise ConfigError(
                f"rollout.freshness_check: the {type(engine).__name__} engine has no "
                "weight_fingerprints()/score(); set rollout.freshness_check=false to run without it"
            )
        return cls(
            Probe.from_prompts(prompts),
            probe_tol=probe_tol,
            engine_dtype=_engine_dtype(engine.weight_fingerprints()),
        )

    def tolerance(self, dtype: torch.dtype) -> float:
        """The probe tolerance: the configured one, else ``PROBE_TOL`` of the engine's dtype."""
        if self.probe_tol is not None:
            return self.probe_tol
        return PROBE_TOL.get(dtype, PROBE_TOL[torch.bfloat16])

    def check(
        self, policy: Policy, engine: Any, sent: Mapping[str, Fingerprint], *, step: int
    ) -> CheckResult:
        """Raise ``WeightSyncError`` (on every rank) unless ``engine`` now holds ``sent``; ``engine`` is None on
        ranks without one (they still join the trainer's probe forward and the vote)."""
        start = time.perf_counter()
        trainer_lp, _ = policy.logprobs(self.probe.batch())  # collective under FSDP
        return self.verify(trainer_lp, engine, sent, step=step, start=start)

    def verify(
        self,
        trainer_lp: Tensor,
        engine: Any,
        sent: Mapping[str, Fingerprint],
        *,
        step: int,
        start: float | None = None,
        prior: str | None = None,
        adapters: bool = False,
    ) -> CheckResult:
        """``check`` given the trainer's probe log-probs (a split rollout rank receives them: it has no
        policy); ``prior``: a problem found before the engine is read (split placement: in transit), reported
        first and through the same vote. ``adapters``: ``sent`` are LoRA adapter tensors, compared with the
        engine's ``adapter_fingerprints()`` (the probe then scores the base model with the adapter)."""
        start = time.perf_counter() if start is None else start
        problem: str | None = prior
        gap = gap_max = generation = 0.0
        tol = self.tolerance(next(iter(sent.values())).dtype if sent else torch.float32)
        checked = 0
        cause: RolloutError | None = None
        if engine is not None:
            if not isinstance(engine, InspectableEngine):
                raise WeightSyncError(
                    f"{type(engine).__name__} cannot be inspected (needs weight_fingerprints() "
                    "and score()); set rollout.freshness_check=false to run without the gate"
                )
            try:
                held = (
                    cast(AdapterEngine, engine).adapter_fingerprints()
                    if adapters
                    else engine.weight_fingerprints()
                )
                checked = len(held.fingerprints)
                if (
                    not adapters
                ):  # the adapters keep the trainer's float32 masters, whatever the engine computes in
                    self.engine_dtype = _engine_dtype(held)
                tol = self.tolerance(self.engine_dtype or torch.float32)
                problem = problem or compare_fingerprints(sent, held)
                engine_lp = engine.score(self.probe.sequences, self.probe.prompt_lens)
                diffs = [
                    abs(e - float(t))
                    for row, trow in zip(engine_lp, trainer_lp.tolist(), strict=True)
                    for e, t in zip(row, trow, strict=False)
                ]  # trainer rows are right-padded
                gap = sum(diffs) / max(len(diffs), 1)
                gap_max = max(diffs, default=0.0)
                if problem is None and not gap <= tol:
                    problem = (
                        f"probe gap {gap:.3g} nats/token (max {gap_max:.3g}) exceeds the tolerance {tol:.3g} "
                        "for the engine's dtype: the engine does not serve the trainer's weights"
                    )
                generation, generation_max = self.probe.generation_gap(engine)
                if problem is None and not generation <= tol:
                    problem = (
                        f"generation probe gap {generation:.3g} nats/token (max {generation_max:.3g}) between the "
                        f"engine's generated and scored log-probs exceeds the tolerance {tol:.3g}: generation "
                        "reads stale state (prefix-cache KV of older weights?)"
                    )
            except RolloutError as exc:
                # the engine's own check failed (engine cores that disagree: vllm_cores): a mismatch like any
                # other, reported through the vote, which every rank must reach
                problem, cause = problem or str(exc), exc
        flags = dist.all_reduce_max(torch.tensor([1.0 if problem else 0.0, gap, gap_max, generation]))
        if float(flags[0]) > 0:
            where = f"rank {dist.rank()}: " if dist.world_size() > 1 else ""
            raise WeightSyncError(
                f"freshness gate failed after the hand-off of step {step}: {where}"
                f"{problem or 'another rank reported a mismatch (see its error)'}"
            ) from cause
        return CheckResult(
            float(flags[1]), float(flags[2]), tol, time.perf_counter() - start, checked, float(flags[3])
        )


def _engine_dtype(held: EngineWeights) -> torch.dtype:
    floats = [fp.dtype for fp in held.fingerprints.values() if fp.dtype.is_floating_point]
    return floats[0] if floats else torch.float32
