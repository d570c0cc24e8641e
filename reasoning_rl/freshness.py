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

A failure raises ``WeightSyncError`` naming the first bad tensor or the probe gap, on every rank (the
check is collective like the hand-off: each engine-holding rank checks its own engine).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch import Tensor

from reasoning_rl import dist

if TYPE_CHECKING:
    from reasoning_rl.policy.batch import TokenBatch
    from reasoning_rl.policy.policy import Policy

# Mean |log p_engine - log p_trainer| per probe token allowed for the engine's dtype: a few x the spread that
# kernel differences give at that precision (fp32: measured <= 1e-4 between vLLM CPU and the trainer).
PROBE_TOL: dict[torch.dtype, float] = {torch.float32: 5e-3, torch.float16: 5e-2, torch.bfloat16: 1e-1}
SUM_RTOL = 1e-9  # float64 summation-order slack (pieces of a fused tensor vs the whole)
# The same for the index-weighted sums, relative to (largest index x L1 norm): float64 summation of float32/bf16
# values is ~1e-15 off, so a swap of two rows whose sums differ by more than ~1e-11 of the L1 norm x rows fails.
WEIGHTED_RTOL = 1e-11


class WeightSyncError(RuntimeError):
    """The engine does not serve the weights the trainer just sent (dropped/renamed/stale tensor, probe gap)."""


@dataclass(frozen=True)
class Fingerprint:
    """Checksum of one tensor: float64 sum, sum of squares and L1 norm; the row-index- and column-index-weighted
    sums (``by_row``: sum over rows r of r x row r's sum, dimension 0; ``by_col`` the same over the last
    dimension, 0 for 1-D tensors); its rows (first dimension), element count and dtype."""

    total: float
    sumsq: float
    numel: int
    dtype: torch.dtype
    l1: float = 0.0
    by_row: float = 0.0
    by_col: float = 0.0
    rows: int = 0

    def plus(self, other: Fingerprint) -> Fingerprint:
        """The fingerprint of ``other`` concatenated after this tensor along dimension 0 (a fused parameter's
        next piece): ``other``'s rows move down by this tensor's rows."""
        return Fingerprint(
            self.total + other.total,
            self.sumsq + other.sumsq,
            self.numel + other.numel,
            self.dtype,
            self.l1 + other.l1,
            self.by_row + other.by_row + self.rows * other.total,
            self.by_col + other.by_col,
            self.rows + other.rows,
        )


@runtime_checkable
class InspectableEngine(Protocol):
    """What the gate needs from a rollout engine besides ``load_weights``."""

    def weight_fingerprints(self) -> EngineWeights: ...

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]: ...


@dataclass
class EngineWeights:
    """An engine's parameters as fingerprints under its own names, and how its fused names map to HF pieces
    (``{"qkv_proj": ["q_proj", "k_proj", "v_proj"]}``: one path component replaced)."""

    fingerprints: dict[str, Fingerprint]
    packed: dict[str, list[str]] = field(default_factory=dict)


def fingerprint_tensors(
    named: Iterable[tuple[str, Tensor]], cast: torch.dtype | None = None
) -> dict[str, Fingerprint]:
    """Fingerprints of ``named`` tensors, reduced where they lie, with one host sync for all of them."""
    collector = SentFingerprints(cast)
    for name, t in named:
        collector.observe(name, t)
    return collector.result()


def _device_sums(t: Tensor) -> Tensor:
    """(sum, sum of squares, L1, row-weighted sum, column-weighted sum) in float64 on the tensor's device,
    without a host sync."""
    rows = t.reshape(t.shape[0] if t.dim() else 1, -1).sum(dim=1, dtype=torch.float64)
    by_row = (rows * torch.arange(rows.numel(), dtype=torch.float64, device=t.device)).sum()
    if t.dim() >= 2:
        cols = t.reshape(-1, t.shape[-1]).sum(dim=0, dtype=torch.float64)
        by_col = (cols * torch.arange(cols.numel(), dtype=torch.float64, device=t.device)).sum()
    else:
        by_col = torch.zeros((), dtype=torch.float64, device=t.device)
    return torch.stack(
        [
            rows.sum(),
            torch.linalg.vector_norm(t, dtype=torch.float64).square(),
            torch.linalg.vector_norm(t, ord=1, dtype=torch.float64),
            by_row,
            by_col,
        ]
    )


class SentFingerprints:
    """Collects the fingerprint of each tensor as the hand-off streams it (``observe`` per tensor), in ``cast``
    (the engine's dtype) when given: what the engine must hold after rounding. Reductions stay on the
    tensors' device until ``result`` (one transfer for all)."""

    def __init__(self, cast: torch.dtype | None = None) -> None:
        self.cast = cast
        self._pending: list[tuple[str, Tensor, torch.dtype, int, int]] = []

    def observe(self, name: str, tensor: Tensor) -> None:
        t = tensor.detach()
        if self.cast is not None and t.is_floating_point() and t.dtype != self.cast:
            t = t.to(self.cast)  # one transient copy of this tensor, on its device
        self._pending.append((name, _device_sums(t), t.dtype, t.numel(), t.shape[0] if t.dim() else 1))

    def result(self) -> dict[str, Fingerprint]:
        if not self._pending:
            return {}
        dev = self._pending[0][1].device
        sums = torch.stack([p if p.device == dev else p.to(dev) for _, p, _, _, _ in self._pending])
        values = sums.cpu().tolist()
        return {
            n: Fingerprint(v[0], v[1], k, d, v[2], v[3], v[4], r)
            for (n, _, d, k, r), v in zip(self._pending, values, strict=True)
        }


def engine_name(hf_name: str, packed: Mapping[str, list[str]]) -> str:
    """The engine parameter that holds HF tensor ``hf_name`` (``...q_proj.weight`` -> ``...qkv_proj.weight``)."""
    return _placement(hf_name, packed)[0]


def _placement(hf_name: str, packed: Mapping[str, list[str]]) -> tuple[str, int]:
    """The engine parameter holding ``hf_name`` and the piece's position in it (0 for an unfused one)."""
    piece_to_fused = {piece: (fused, i) for fused, pieces in packed.items() for i, piece in enumerate(pieces)}
    parts, index = [], 0
    for p in hf_name.split("."):
        fused, i = piece_to_fused.get(p, (p, 0))
        parts.append(fused)
        index = max(index, i)
    return ".".join(parts), index


def _cast_eps(sent: torch.dtype, held: torch.dtype) -> float:
    """Relative rounding of casting ``sent`` values to ``held`` (0 when nothing is lost)."""
    if not (sent.is_floating_point and held.is_floating_point):
        return 0.0
    if torch.finfo(held).eps <= torch.finfo(sent).eps:
        return 0.0
    return torch.finfo(held).eps / 2


def _agrees(sent: Fingerprint, held: Fingerprint) -> bool:
    eps = _cast_eps(sent.dtype, held.dtype)
    l1_bound = math.sqrt(max(sent.numel, 1) * max(sent.sumsq, 0.0))  # >= sum |x|
    tol_sum = (eps + SUM_RTOL) * l1_bound + 1e-12
    tol_sq = (2 * eps + eps * eps + SUM_RTOL) * sent.sumsq + 1e-12
    tol_l1 = (eps + SUM_RTOL) * sent.l1 + 1e-12
    cols = sent.numel // max(sent.rows, 1)
    tol_row = (eps + WEIGHTED_RTOL) * max(held.rows, sent.rows, 1) * sent.l1 + 1e-12
    tol_col = (eps + WEIGHTED_RTOL) * max(cols, 1) * sent.l1 + 1e-12
    return (
        abs(sent.total - held.total) <= tol_sum
        and abs(sent.sumsq - held.sumsq) <= tol_sq
        and abs(sent.l1 - held.l1) <= tol_l1
        and abs(sent.by_row - held.by_row) <= tol_row
        and abs(sent.by_col - held.by_col) <= tol_col
    )


def compare_fingerprints(sent: Mapping[str, Fingerprint], held: EngineWeights) -> str | None:
    """None when every sent tensor arrived and every engine parameter was sent; else a message naming the first
    bad tensor (in send order), then the first engine parameter the hand-off did not cover."""
    by_target: dict[str, list[tuple[int, str, Fingerprint]]] = {}
    for name, fp in sent.items():
        target, index = _placement(name, held.packed)
        by_target.setdefault(target, []).append((index, name, fp))
    grouped: dict[str, tuple[list[str], Fingerprint]] = {}
    for target, parts in by_target.items():
        parts.sort(key=lambda part: part[0])  # the engine's order of the pieces, whatever the send order
        acc = parts[0][2]
        for _, _, fp in parts[1:]:
            acc = acc.plus(fp)
        grouped[target] = ([name for _, name, _ in parts], acc)
    for target, (pieces, fp) in grouped.items():
        got = held.fingerprints.get(target)
        what = pieces[0] if len(pieces) == 1 else f"{target} (from {', '.join(pieces)})"
        if got is None:
            return f"tensor {what}: the engine has no parameter {target!r}"
        if not _agrees(fp, got):
            return (
                f"tensor {what}: sent sum={fp.total:.9g} sumsq={fp.sumsq:.9g}, engine holds "
                f"sum={got.total:.9g} sumsq={got.sumsq:.9g} ({got.dtype}), or its rows/columns are not "
                "in the sent order"
            )
    unsent = [name for name in held.fingerprints if name not in grouped]
    if unsent:
        return (
            f"engine parameter {unsent[0]!r} was not in the hand-off ({len(unsent)} such): it would keep "
            "serving stale values"
        )
    return None


@dataclass
class Probe:
    """Fixed sequences scored after each hand-off: ``prompt_lens[i]`` tokens of context, the rest scored."""

    sequences: list[list[int]]
    prompt_lens: list[int]

    @classmethod
    def from_prompts(cls, prompts: list[list[int]], count: int = 2, max_tokens: int = 48) -> Probe:
        """The first ``count`` prompts (at most ``max_tokens`` tokens each), the second half of each scored:
        real text in the run's own template, fixed at run start, no sampling involved."""
        seqs = [list(p[-max_tokens:]) for p in prompts if len(p) >= 2][:count]
        if not seqs:
            raise ValueError("the freshness probe needs at least one prompt of >= 2 tokens")
        return cls(seqs, [max(1, len(s) // 2) for s in seqs])

    def batch(self) -> TokenBatch:
        from reasoning_rl.policy.batch import TokenBatch

        return TokenBatch([torch.tensor(s) for s in self.sequences], list(self.prompt_lens))


@dataclass
class CheckResult:
    """One gate pass: probe gap (mean and max |delta log p| per token), its tolerance, the check's seconds."""

    probe_gap: float
    probe_gap_max: float
    probe_tol: float
    seconds: float
    tensors_checked: int

    def as_metrics(self, prefix: str = "handoff/") -> dict[str, float]:
        return {
            f"{prefix}probe_gap": self.probe_gap,
            f"{prefix}probe_gap_max": self.probe_gap_max,
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
    ) -> CheckResult:
        """``check`` given the trainer's probe log-probs (a split rollout rank receives them: it has no
        policy); ``prior``: a problem found before the engine is read (split placement: in transit), reported
        first and through the same vote."""
        start = time.perf_counter() if start is None else start
        problem: str | None = prior
        gap = gap_max = 0.0
        tol = self.tolerance(next(iter(sent.values())).dtype if sent else torch.float32)
        checked = 0
        if engine is not None:
            if not isinstance(engine, InspectableEngine):
                raise WeightSyncError(
                    f"{type(engine).__name__} cannot be inspected (needs weight_fingerprints() "
                    "and score()); set rollout.freshness_check=false to run without the gate"
                )
            held = engine.weight_fingerprints()
            checked = len(held.fingerprints)
            self.engine_dtype = _engine_dtype(held)
            tol = self.tolerance(self.engine_dtype)
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
        flags = dist.all_reduce_max(torch.tensor([1.0 if problem else 0.0, gap, gap_max]))
        if float(flags[0]) > 0:
            where = f"rank {dist.rank()}: " if dist.world_size() > 1 else ""
            raise WeightSyncError(
                f"freshness gate failed after the hand-off of step {step}: {where}"
                f"{problem or 'another rank reported a mismatch (see its error)'}"
            )
        return CheckResult(float(flags[1]), float(flags[2]), tol, time.perf_counter() - start, checked)


def _engine_dtype(held: EngineWeights) -> torch.dtype:
    floats = [fp.dtype for fp in held.fingerprints.values() if fp.dtype.is_floating_point]
    return floats[0] if floats else torch.float32
