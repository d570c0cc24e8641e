"""Host time per engine step (issues 31, 44): a synchronous step's requests vs continuous ones at one running batch.

Continuous requests (``rollout.max_lag > 0``) used to come back from ``VLLMEngine.advance`` as one delta per
request per engine step, each stamped with that step's policy version (on the H200, ~30 ms host time per step at
~1,000 resident requests vs ~6.6 ms in the sync step). Since issue 44 they report once, at their end, like the
sync step's, their per-token versions from spans the engine records at each weight swap. Three kinds of round,
``N`` requests of ``T`` tokens each on the tiny model (its forward is cheap, so per-request Python dominates),
each consumed as the frontier consumes them (tokens, log-probs and per-token versions appended per request):

- ``sync``: ``deltas=False``, no swap (the ``max_lag = 0`` step);
- ``continuous``: ``deltas=False`` with a weight swap (a real ``load_weights``, new version) halfway through the
  round while every request is resident, and a ``partial`` read of all of them before it (what a checkpoint
  does); the swap and the read are timed apart, not in the per-step figure;
- ``delta``: the pre-issue-44 continuous path (one delta per request per step), for reference;
- ``no_logprobs``: ``sync`` without per-token log-probs (the synchronous step of one update per batch asks for
  none; continuous runs need them, decoupled PPO's behaviour policy): what the log-probs cost per step;
- ``raw``: the same requests as ``no_logprobs`` through vLLM's own ``LLM.generate`` on the engine's ``LLM``
  (final outputs only, no log-probs): vLLM's floor, so ``no_logprobs / raw`` is what our engine wrapper adds per
  step (the anchor's generation runs the ``no_logprobs`` path).

Host time is the process's CPU time (``time.process_time``) inside ``advance`` and the consumer, with torch on one
thread: on this shared 2-core machine wall time swung 6 -> 150 ms per step with the load of other processes (two
torch threads spinning at their barriers), CPU time did not; wall time is reported beside it. Rounds interleaved
(sync, continuous, delta, sync, ...), the first of each kind dropped (warm-up), GC off as in the frontier. Writes
bench/out/engine_step.json.
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

import torch

from reasoning_rl.rollout import Request, SamplingConfig
from reasoning_rl.rollout.vllm_engine import VLLMEngine
from reasoning_rl.tiny import build_tiny_model

KINDS = ("sync", "continuous", "delta", "no_logprobs", "raw")


def one_round(
    engine: VLLMEngine,
    weights: dict[str, torch.Tensor],
    kind: str,
    tag: str,
    n: int,
    sampling: SamplingConfig,
) -> tuple[float, float, float]:
    """(CPU ms and wall ms per engine step while ``n`` requests run to ``sampling.max_tokens``, CPU ms of the
    swap + read)."""
    if kind == "raw":
        return raw_round(engine, n, sampling)
    ids = [f"{tag}-{i}" for i in range(n)]
    engine.submit([Request(r, [5, 6, 7, 8], sampling, i, deltas=kind == "delta") for i, r in enumerate(ids)])
    got: dict[str, tuple[list[int], list[float], list[int]]] = {r: ([], [], []) for r in ids}
    stepped = wall = aside = 0.0
    steps, finished = 0, 0
    gc.disable()
    try:
        while finished < n:
            t, w = time.process_time(), time.perf_counter()
            for d in engine.advance():
                tokens, logprobs, versions = got[d.id]
                tokens += d.token_ids
                logprobs += d.logprobs
                versions += d.token_versions()
                finished += d.finished
            stepped += time.process_time() - t
            wall += time.perf_counter() - w
            steps += 1
            if kind == "continuous" and steps == sampling.max_tokens // 2:
                t = time.process_time()
                read = engine.partial(ids)
                assert len(read) == n and all(len(d.token_ids) == steps for d in read)
                engine.load_weights(iter(weights.items()), version=engine.version + 1)
                aside = time.process_time() - t
    finally:
        gc.enable()
    if kind == "continuous":  # every request crossed the swap
        assert all(len(set(v)) == 2 for _, _, v in got.values())
    return stepped * 1e3 / steps, wall * 1e3 / steps, aside * 1e3


def raw_round(engine: VLLMEngine, n: int, sampling: SamplingConfig) -> tuple[float, float, float]:
    """``LLM.generate`` of the same ``n`` requests (final outputs only, no log-probs): vLLM's own loop. Its steps
    are ``max_tokens`` (every request is admitted at once and runs to the cap, as in the other rounds)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = [
        SamplingParams(
            temperature=sampling.temperature, max_tokens=sampling.max_tokens, ignore_eos=True, seed=i
        )
        for i in range(n)
    ]
    prompts = [TokensPrompt(prompt_token_ids=[5, 6, 7, 8]) for _ in range(n)]
    gc.disable()
    try:
        t, w = time.process_time(), time.perf_counter()
        outs = engine.llm.generate(prompts, params, use_tqdm=False)
        cpu, wall = time.process_time() - t, time.perf_counter() - w
    finally:
        gc.enable()
    assert sum(len(o.outputs[0].token_ids) for o in outs) == n * sampling.max_tokens
    steps = sampling.max_tokens
    return cpu * 1e3 / steps, wall * 1e3 / steps, 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="bench/out/engine_step.json")
    args = ap.parse_args()
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    torch.set_num_threads(1)
    n, t = args.requests, args.tokens
    model = build_tiny_model(Path(tempfile.mkdtemp(prefix="rrl-engine-step-")))
    from transformers import AutoModelForCausalLM

    weights = {
        k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(model).state_dict().items()
    }
    engine = VLLMEngine(
        str(model), max_model_len=t + 32, max_num_seqs=n, max_num_batched_tokens=max(4096, 8 * n)
    )
    sampling = SamplingConfig(n=1, max_tokens=t, temperature=1.0, ignore_eos=True, logprobs=True)
    ms: dict[str, list[float]] = {k: [] for k in KINDS}
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    aside: list[float] = []
    for r in range(args.rounds + 1):
        for kind in KINDS:
            s = sampling.model_copy(update={"logprobs": False}) if kind == "no_logprobs" else sampling
            cpu_ms, wall_ms, aside_ms = one_round(engine, weights, kind, f"{kind}{r}", n, s)
            if r:
                ms[kind].append(cpu_ms)
                wall[kind].append(wall_ms)
                if kind == "continuous":
                    aside.append(aside_ms)
    med = {k: statistics.median(v) for k, v in ms.items()}
    wall_med = {k: statistics.median(v) for k, v in wall.items()}
    result = {
        "requests": n,
        "tokens": t,
        "torch_threads": torch.get_num_threads(),
        "cpu_ms_per_step": ms,
        "wall_ms_per_step": wall,
        "median_cpu_ms": med,
        "median_wall_ms": wall_med,
        "continuous_over_sync": med["continuous"] / med["sync"],
        "delta_over_sync": med["delta"] / med["sync"],
        "sync_over_no_logprobs": med["sync"] / med["no_logprobs"],
        "no_logprobs_over_raw": med["no_logprobs"] / med["raw"],
        "swap_and_read_ms": aside,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    for k, v in ms.items():
        print(
            f"{k:>10}: median {med[k]:.2f} CPU ms/step (min {min(v):.2f}, max {max(v):.2f}; {len(v)} rounds); "
            f"wall median {wall_med[k]:.2f} ms"
        )
    print(
        f"continuous / sync: {result['continuous_over_sync']:.3f}x; delta / sync: {result['delta_over_sync']:.3f}x; "
        f"sync / no_logprobs: {result['sync_over_no_logprobs']:.3f}x; "
        f"no_logprobs / raw (our wrapper): {result['no_logprobs_over_raw']:.3f}x; "
        f"swap + partial read (not in the steps): median {statistics.median(aside):.1f} ms"
    )


if __name__ == "__main__":
    main()
