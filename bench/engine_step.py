"""What a resident request costs per engine step (issue 31): the continuous path's per-step outputs vs one output.

Continuous requests (``rollout.max_lag > 0``) come back from ``VLLMEngine.advance`` as one delta per request per
engine step (each step's tokens carry that step's policy version); synchronous ones only when they finish. On
the H200 realistic run the continuous engine stepped at ~32 ms with ~1,000 resident requests against ~7 ms in
the sync run; this separates the outputs' share from the scheduler's. ``N`` requests of ``T`` tokens each on
the tiny model (its forward is cheap, so per-request Python dominates), rounds interleaved (delta, final,
delta, final, ...), the first round of each dropped (warm-up). Writes bench/out/engine_step.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from reasoning_rl.rollout import Request, SamplingConfig
from reasoning_rl.rollout.vllm_engine import VLLMEngine
from reasoning_rl.tiny import build_tiny_model


def one_round(engine: VLLMEngine, tag: str, n: int, sampling: SamplingConfig, deltas: bool) -> float:
    """ms per engine step while ``n`` requests run to ``sampling.max_tokens`` (GC off, as the frontier runs)."""
    engine.submit([Request(f"{tag}-{i}", [5, 6, 7, 8], sampling, i, deltas=deltas) for i in range(n)])
    gc.disable()
    t, steps, tokens = time.perf_counter(), 0, 0
    try:
        while tokens < n * sampling.max_tokens:
            tokens += sum(len(d.token_ids) for d in engine.advance())
            steps += 1
    finally:
        gc.enable()
    return (time.perf_counter() - t) * 1e3 / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="bench/out/engine_step.json")
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    n, t = args.requests, args.tokens
    model = build_tiny_model(Path(tempfile.mkdtemp(prefix="rrl-engine-step-")))
    engine = VLLMEngine(
        str(model), max_model_len=t + 32, max_num_seqs=n, max_num_batched_tokens=max(4096, 8 * n)
    )
    sampling = SamplingConfig(n=1, max_tokens=t, temperature=1.0, ignore_eos=True, logprobs=True)
    ms: dict[str, list[float]] = {"delta": [], "final": []}
    for r in range(args.rounds + 1):
        for kind in ms:
            got = one_round(engine, f"{kind}{r}", n, sampling, deltas=kind == "delta")
            if r:
                ms[kind].append(got)
    med = {k: statistics.median(v) for k, v in ms.items()}
    result = {
        "requests": n,
        "tokens": t,
        "ms_per_step": ms,
        "median_ms": med,
        "delta_extra_us_per_request": (med["delta"] - med["final"]) * 1e3 / n,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    for k, v in ms.items():
        print(f"{k:>5}: median {med[k]:.2f} ms/step (min {min(v):.2f}, max {max(v):.2f}; {len(v)} rounds)")
    print(
        f"per-step outputs cost {result['delta_extra_us_per_request']:.1f} us per resident request per step"
    )


if __name__ == "__main__":
    main()
