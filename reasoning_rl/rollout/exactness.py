"""Whether an engine samples from the policy's distribution: the statistics behind the speculative-decoding
exactness tests (docs/speculative.md) and bench/gpu/speculative.py.

- ``Calibration``: for each generated token, log p(x) + H(p) and 1[x = EOS] - p(EOS) under the policy's full
  next-token distribution at that position have mean zero given the context, whatever came before (a martingale
  difference), so their sums over every token of every response, divided by the square root of their summed
  conditional variances, are ~N(0, 1) for an exact sampler, dependent tokens included. A sampler that draws from
  a flatter or sharper distribution moves the first, one that under- or over-samples EOS the second.
- ``ks_2samp``: two-sample Kolmogorov-Smirnov on a per-response statistic (lengths), one response per prompt.
- ``paired_permutation_p``: token frequencies of two arms over the same prompts (one response per prompt in
  each), with responses as the units (their tokens are not independent): labels swapped within pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Calibration:
    """Running sums over generated tokens (``add`` one response at a time)."""

    eos_id: int
    tokens: int = 0
    logprob_sum: float = 0.0
    logprob_var: float = 0.0
    eos_sum: float = 0.0
    eos_var: float = 0.0

    def add(self, logprobs: torch.Tensor, token_ids: torch.Tensor) -> None:
        """``logprobs``: [T, V] log-softmax of the policy at each generated position (temperature applied);
        ``token_ids``: [T] the tokens the engine drew there."""
        lp = logprobs.double()
        p = lp.exp()
        plogp = torch.where(p > 0, p * lp, torch.zeros_like(p))
        entropy = -plogp.sum(-1)
        chosen = lp.gather(-1, token_ids.long()[:, None])[:, 0]
        centred = torch.where(p > 0, lp + entropy[:, None], torch.zeros_like(p))
        self.logprob_sum += float((chosen + entropy).sum())
        self.logprob_var += float((p * centred.square()).sum())
        p_eos = p[:, self.eos_id]
        self.eos_sum += float(((token_ids == self.eos_id).double() - p_eos).sum())
        self.eos_var += float((p_eos * (1 - p_eos)).sum())
        self.tokens += int(token_ids.numel())

    @property
    def z_logprob(self) -> float:
        """< 0: the drawn tokens are less likely than the policy's own draws (a flatter sampler)."""
        return self.logprob_sum / math.sqrt(self.logprob_var) if self.logprob_var > 0 else 0.0

    @property
    def z_eos(self) -> float:
        """< 0: EOS drawn less often than the policy gives it (longer responses)."""
        return self.eos_sum / math.sqrt(self.eos_var) if self.eos_var > 0 else 0.0


def ks_2samp(a: list[float], b: list[float]) -> dict[str, float]:
    """Two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value (no scipy on every machine)."""
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    if not n or not m:
        return {"d": float("nan"), "p": float("nan"), "n": n, "m": m}
    i = j = 0
    d = 0.0
    while i < n and j < m:
        v = min(xs[i], ys[j])
        while i < n and xs[i] <= v:
            i += 1
        while j < m and ys[j] <= v:
            j += 1
        d = max(d, abs(i / n - j / m))
    en = math.sqrt(n * m / (n + m))
    lam = (en + 0.12 + 0.11 / en) * d
    p = (
        2.0 * sum((-1) ** (k - 1) * math.exp(-2.0 * (k * lam) ** 2) for k in range(1, 101))
        if lam > 0
        else 1.0
    )
    return {"d": round(d, 4), "p": min(1.0, max(0.0, p)), "n": n, "m": m}


def paired_permutation_p(x: np.ndarray, y: np.ndarray, *, rounds: int = 2000, seed: int = 0) -> float:
    """p-value that two arms' pooled token frequencies differ only by chance. ``x``, ``y``: [prompts, vocab]
    token counts of each prompt's response in each arm. Statistic: the chi-square distance between the pooled
    histograms; its null distribution swaps each prompt's two responses at random (exact under the hypothesis
    that both arms sample each prompt's response from the same distribution)."""
    diff = (x - y).astype(np.float64)
    total = (x + y).sum(0).astype(np.float64)
    keep = total > 0
    diff, weight = diff[:, keep], 1.0 / total[keep]
    observed = float((diff.sum(0) ** 2 * weight).sum())
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(rounds, diff.shape[0]))
    null = ((signs @ diff) ** 2 * weight).sum(1)
    return float((1 + (null >= observed).sum()) / (rounds + 1))
