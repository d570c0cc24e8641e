"""Host cost of a vLLM decode step per running request, in-process engine core vs vLLM's own engine process.

    python bench/gpu/engine_mode.py --shape qwen --out OUT.json          # on the GPU machine (kit installed)
    python bench/gpu/engine_mode.py --shape tiny --requests 16 --tokens 16 --out /tmp/em.json   # CPU dry run

Why (issues 42 and 44, 2026-12-07 H200 calls): generation on the kit's vLLM 0.24 ran at ~20 us per running
request per decode step on the anchor (Qwen2-0.5B shape, 256 x 256 tokens) and on the learning workload alike,
whatever the batch: the step is bound by the host, not the GPU. ``VLLMEngine`` runs the engine core in the
trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, for the in-place weight hand-off), so scheduling, the
model runner's input preparation and output processing share one thread; vLLM's default puts the engine core in a
process of its own, beside output processing. This measures what that split is worth before anything is built on
it: each mode in its own process (the variable is read at import), the same requests (fixed length, ignore_eos,
a seed per request as the trainer sets), rounds alternating per-token log-probs off and on (continuous runs ask for
them: decoupled PPO's behaviour policy). Σtokens/Σtime per mode and log-prob setting; raw rounds in ``runs``
(``throughput.result``'s format: steps_s = seconds per round, tokens = generated tokens per round).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("inproc", "mp")


def child(args: argparse.Namespace) -> None:
    """One engine in this process (``--mode``): a warm-up round, then ``--rounds`` rounds each of log-probs off
    and on, alternating; prints one JSON line."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if args.mode == "mp" else "0"
    import random

    import torch
    from shapes import build_random_model
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    model = build_random_model(args.shape, Path(args.work) / f"model_{args.shape}")
    on_gpu = torch.cuda.is_available()
    kw: dict[str, Any] = {} if on_gpu else {"enforce_eager": True, "enable_chunked_prefill": False}
    llm = LLM(
        model=str(model),
        dtype="bfloat16" if on_gpu else "float32",
        gpu_memory_utilization=0.3 if on_gpu else 0.2,
        max_model_len=args.prompt + args.tokens + 8,
        max_num_seqs=args.requests,
        seed=0,
        **kw,
    )
    rng = random.Random(0)
    vocab = int(llm.llm_engine.model_config.get_vocab_size())
    prompts = [
        TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab) for _ in range(args.prompt)])
        for _ in range(args.requests)
    ]

    def one_round(r: int, logprobs: bool) -> tuple[float, int]:
        params = [
            SamplingParams(
                temperature=1.0,
                max_tokens=args.tokens,
                ignore_eos=True,
                seed=1000 * r + i,
                logprobs=0 if logprobs else None,
                detokenize=False,
            )
            for i in range(args.requests)
        ]
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        dt = time.perf_counter() - t0
        return dt, sum(len(o.outputs[0].token_ids) for o in outs)

    one_round(0, True)  # warm-up (first-shape kernels, log-prob kernel JIT)
    rounds: dict[str, list[tuple[float, int]]] = {"off": [], "on": []}
    for r in range(1, args.rounds + 1):
        for lp in ("off", "on"):
            rounds[lp].append(one_round(r, lp == "on"))
    print("RESULT " + json.dumps({"mode": args.mode, "rounds": rounds}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen")
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/rrl_em")
    ap.add_argument("--out", required=True)
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # the child's engine mode
    ap.add_argument("--timeout", type=float, default=150.0, help="seconds per mode's process")
    args = ap.parse_args()
    if args.mode:
        child(args)
        return
    from throughput import result, table

    runs: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for mode in MODES:
        cmd = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            failed[mode] = f"timed out after {args.timeout:.0f} s"
            continue
        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            failed[mode] = (p.stderr or p.stdout)[-2000:]
            continue
        got = json.loads(line[len("RESULT ") :])
        print(f"MODE {mode}: {time.time() - t0:.0f} s in its process", flush=True)
        for lp, rs in got["rounds"].items():
            runs.append(
                {
                    "name": f"{mode}:logprobs-{lp}",
                    "steps_s": [round(dt, 4) for dt, _ in rs],
                    "tokens": [n for _, n in rs],
                }
            )
    workload = {
        "shape": args.shape,
        "requests": args.requests,
        "prompt_tokens": args.prompt,
        "max_tokens": args.tokens,
        "ignore_eos": True,
        "tokens": "generated tokens per round (prompt tokens not counted)",
    }
    out = result(workload, runs)
    out["failed"] = failed
    for r in runs:
        steps = args.tokens  # fixed length: one decode step per generated token of each request
        r["us_per_request_step"] = round(
            1e6 * sum(r["steps_s"]) / (len(r["steps_s"]) * steps * args.requests), 2
        )
        print(f"{r['name']:>22}: {r['us_per_request_step']} us per request-step, rounds {r['steps_s']}")
    print(table(out))
    if failed:
        print("FAILED " + json.dumps(failed)[:3000])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
