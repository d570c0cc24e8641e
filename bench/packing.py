"""Packed vs right-padded micro-batches on a long-tailed length distribution (CPU): padding share and tokens/s.

Workload: 32 sequences, 64-token prompts, response lengths log-normal (median 200, sigma 1.0, capped at 1,600:
the GPU bench's median 2k / cap 16k at a tenth of the scale), a random-init Qwen2 (hidden 256, 4 layers, 8 heads,
2 KV heads), float32, micro-batch budget 2,048 tokens. Per layout (``algorithm.packing`` off / on / auto) it
times one optimizer step (``Policy.train_step``, on-policy) and one no-grad log-prob pass: the median of 3 rounds
that interleave the runs (the machine is shared and its load moves within minutes; a warm-up round first), and
reports the layout's padding share and tokens per CPU-second of the step (process time: less moved by other
work on the machine than wall time); the fixed-length baseline gives every sequence the mean response
length (the same total tokens, nothing to pad). Prints a table; writes bench/out/packing.json.

    .venv/bin/python bench/packing.py

The same measurement runs on the GPU at the Qwen2.5-1.5B shape: ``bench/gpu/packing.py``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "bench" / "out" / "packing.json"
ROUNDS = 3

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.batch import attention_cost  # noqa: E402


def lognormal_lengths(n: int, median: float, sigma: float, cap: int, seed: int = 0) -> list[int]:
    """``n`` response lengths, log-normal with this median and sigma, clipped to [16, cap]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.exp(math.log(median) + sigma * torch.randn(n, generator=g))
    return [int(v) for v in x.clamp(16, cap)]


def make_batch(response_lens: list[int], prompt_len: int, vocab: int, seed: int = 1) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(3, vocab, (prompt_len + r,), generator=g) for r in response_lens]
    return TokenBatch(seqs, [prompt_len] * len(response_lens))


def fixed_lengths(response_lens: list[int]) -> list[int]:
    """The same total response tokens, split evenly (the last ones one token longer)."""
    n, total = len(response_lens), sum(response_lens)
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def measure(
    policy: Policy,
    batch: TokenBatch,
    packing: str,
    *,
    repeats: int,
    warmup: bool = True,
    sync: Callable[[], None] = lambda: None,
    attn: str = "sdpa",
) -> dict[str, Any]:
    """Median step and scoring-pass times of ``policy`` on ``batch`` with this layout choice (after one
    untimed warm-up round when ``warmup``: allocator, kernels, compiled attention)."""
    if attn != policy.lm.config._attn_implementation:
        policy.lm.set_attn_implementation(attn)
    policy.batching.packing = packing  # type: ignore[assignment]
    policy.batching.cost = attention_cost(policy.lm.config)
    layout = policy.batching.layout(batch)
    n = len(batch)
    adv = compute_advantages(
        "grpo", torch.rand(n, generator=torch.Generator().manual_seed(2)), torch.arange(n) // 8
    )
    steps, scores, step_cpu = [], [], []
    for k in range(repeats + int(warmup)):
        sync()
        t0 = time.perf_counter()
        policy.logprobs(batch)
        sync()
        t1, c1 = time.perf_counter(), time.process_time()
        policy.train_step(batch, adv, None, None, LossConfig())
        sync()
        t2, c2 = time.perf_counter(), time.process_time()
        if k or not warmup:
            scores.append(t1 - t0)
            steps.append(t2 - t1)
            step_cpu.append(c2 - c1)
    step, score = statistics.median(steps), statistics.median(scores)
    return {
        "packing": packing,
        "attn": attn,
        "packed": layout.packed,
        "micro_batches": len(layout.blocks),
        "padding_share": round(layout.padding_share, 4),
        "tokens": batch.num_tokens,
        "slots": layout.slots,
        "step_s": round(step, 3),
        "score_s": round(score, 3),
        "step_cpu_s": round(statistics.median(step_cpu), 3),
        "step_tokens_per_s": round(batch.num_tokens / step),
        "score_tokens_per_s": round(batch.num_tokens / score),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| run | layout | micro-batches | padding share | step s | step tokens/s | step tokens/CPU-s "
        "| log-prob pass s | pass tokens/s |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['run']} | {'packed' if r['packed'] else 'padded'} ({r['packing']}, {r['attn']}) | "
            f"{r['micro_batches']} | {100 * r['padding_share']:.1f} % | {r['step_s']} | {r['step_tokens_per_s']} | "
            f"{r.get('step_tokens_per_cpu_s', '-')} | {r['score_s']} | {r['score_tokens_per_s']} |"
        )
    return "\n".join(lines)


def main() -> None:
    from reasoning_rl.tiny import build_tiny_model

    load_before = os.getloadavg()
    torch.manual_seed(0)
    model_dir = build_tiny_model(
        Path(tempfile.mkdtemp(prefix="packing-")), hidden_size=256, num_layers=4, num_heads=8, num_kv_heads=2
    )
    lens = lognormal_lengths(32, median=200, sigma=1.0, cap=1600)
    budget, prompt = 2048, 64
    policy = Policy.from_pretrained(str(model_dir), lr=1e-6, micro_batch_tokens=budget)
    vocab = int(policy.lm.config.vocab_size)
    varied, fixed = make_batch(lens, prompt, vocab), make_batch(fixed_lengths(lens), prompt, vocab)
    runs = [
        ("log-normal", varied, "off"),
        ("log-normal", varied, "on"),
        ("log-normal", varied, "auto"),
        ("fixed length, same tokens", fixed, "off"),
    ]
    rounds = [[measure(policy, b, pk, repeats=1, warmup=r == 0) for _, b, pk in runs] for r in range(ROUNDS)]
    rows = []
    for k, (run, _, _) in enumerate(runs):
        row = {"run": run, **rounds[0][k]}
        for key in ("step_s", "score_s", "step_cpu_s"):
            row[key] = round(statistics.median(rd[k][key] for rd in rounds), 3)
        row["step_tokens_per_s"] = round(row["tokens"] / row["step_s"])
        row["score_tokens_per_s"] = round(row["tokens"] / row["score_s"])
        row["step_tokens_per_cpu_s"] = round(row["tokens"] / row["step_cpu_s"])
        rows.append(row)
        print(row, flush=True)
    result = {
        "workload": {
            "sequences": len(lens),
            "prompt_tokens": prompt,
            "response_lengths": "log-normal median 200, sigma 1.0, cap 1600",
            "response_mean": round(sum(lens) / len(lens), 1),
            "response_max": max(lens),
            "micro_batch_tokens": budget,
            "model": "random Qwen2, hidden 256, 4 layers, 8 heads, 2 KV heads, float32",
            "threads": torch.get_num_threads(),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "rows": rows,
    }
    print(table(rows))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
