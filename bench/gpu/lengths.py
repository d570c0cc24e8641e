"""Response lengths for the issue-45 benches: a fixed log-normal, enforced per request inside vLLM, the same for
ours and TRL.

Why: a random-init model never emits EOS on its own, so without control every response runs to the cap (a
fixed-length workload, where padding and packing never matter). Real reasoning responses are long-tailed: the
learning workload (issue 42, SmolLM2 after SFT on word_chain) had p50 399 of a 1,024 cap and 14.6 % at the cap.
``lognormal_lengths`` scales that shape to any cap (median 0.39 x cap, sigma 0.89: 14.6 % above the cap, cut
there). ``LengthControl`` gives the k-th request that vLLM's ``LLMEngine.add_request`` sees the k-th target
(cycling through one stratified, shuffled set per batch) as its ``max_tokens``; with EOS ignored (our
``rollout.ignore_eos``, TRL's ``generation_kwargs``) each response is exactly its target long. Both our engine and
TRL's colocated ``LLM.generate`` add every sample as one request there.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

MEDIAN_SHARE = 0.39  # the learning workload's p50 over its cap (399 / 1,024)
SIGMA = 0.89  # ln-space spread that puts 14.6 % of the log-normal above the cap, as measured there


def lognormal_lengths(count: int, cap: int, seed: int = 0, floor: int = 16) -> list[int]:
    """``count`` response lengths: the log-normal's quantiles at (i + 0.5) / count (every batch has the same
    multiset, so steps and sides differ only in order), cut to [``floor``, ``cap``], in a seeded order."""
    if count < 1 or cap < floor:
        raise ValueError(f"need count >= 1 and cap >= {floor}; got {count}, {cap}")
    normal = NormalDist(math.log(MEDIAN_SHARE * cap), SIGMA)
    out = [min(cap, max(floor, int(math.exp(normal.inv_cdf((i + 0.5) / count))))) for i in range(count)]
    random.Random(seed).shuffle(out)
    return out


def describe(lengths: list[int], cap: int) -> dict[str, Any]:
    """What a workload states about its lengths: the rule, and p10/p50/p90, mean and share at the cap."""
    s = sorted(lengths)
    return {
        "rule": f"log-normal, median {MEDIAN_SHARE} x cap, sigma {SIGMA}, cut to the cap {cap}",
        "p10": s[len(s) // 10],
        "p50": s[len(s) // 2],
        "p90": s[len(s) * 9 // 10],
        "mean": round(sum(s) / len(s), 1),
        "at_cap": round(sum(x == cap for x in s) / len(s), 4),
    }


class LengthControl:
    """Patches vLLM's ``LLMEngine.add_request`` so that each request for ``cap`` tokens (the run's samples, not
    a freshness probe's few greedy tokens) gets the next of ``lengths`` as its ``max_tokens`` (on a copy of its
    sampling parameters: TRL passes one object for every prompt). ``seen`` counts the requests given a target.
    Use as a context manager; the patch is undone on exit."""

    def __init__(self, lengths: list[int], cap: int) -> None:
        if max(lengths) > cap:
            raise ValueError(f"a target of {max(lengths)} tokens exceeds the cap {cap}")
        self.lengths = lengths
        self.cap = cap
        self.seen = 0
        self._original: Callable[..., Any] | None = None

    def __enter__(self) -> LengthControl:
        from vllm.v1.engine.llm_engine import LLMEngine

        original = LLMEngine.add_request
        control = self

        def add_request(engine: Any, request_id: str, prompt: Any, params: Any, *args: Any, **kw: Any) -> Any:
            if getattr(params, "max_tokens", None) == control.cap:
                params = params.clone()
                params.max_tokens = control.lengths[control.seen % len(control.lengths)]
                control.seen += 1
            return original(engine, request_id, prompt, params, *args, **kw)

        self._original = original
        LLMEngine.add_request = add_request  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        from vllm.v1.engine.llm_engine import LLMEngine

        if self._original is not None:
            LLMEngine.add_request = self._original  # type: ignore[method-assign]
