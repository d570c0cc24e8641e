"""Packed vs right-padded micro-batches at the Qwen2.5-1.5B shape on one GPU (torch + transformers, no vLLM).

    python bench/gpu/packing.py [--budget 32768] [--sequences 64] [--checkpointing] [--tiny]

Workload: a random-init Qwen2.5-1.5B-shaped model (``shapes.py`` "qwen15" dims on a Llama block, bf16 compute under
FSDP2 on one rank), 512-token prompts, response lengths log-normal (median 2,048, sigma 1.0, capped at 16,384;
seed 0), one optimizer step (``Policy.train_step``, on-policy) and one no-grad log-prob pass per timed round,
after a warm-up round (``--repeats``, default 1, so the six runs fit a 10-minute call).
Runs: the log-normal batch right-padded (``algorithm.packing=off``), packed with sdpa (dense block-diagonal mask),
packed with FlexAttention (document ``BlockMask``: other sequences' blocks skipped), ``auto`` with each, and the
fixed-length baseline (every response the mean length: the same total tokens, nothing to pad). Reports padding
share, tokens/s, update MFU (useful FLOPs: 6 N tokens + 6 layers hidden sum(len^2), peak 790 TFLOP/s) and peak
memory; prints a table and writes ``$OUT/packing.json`` (``--out``).

``--tiny``: the tiny shape, 16 sequences, median 64 / cap 512, budget 1,024, float32 on CPU (FlexAttention runs
are skipped there: it has no CPU backward). Tested on CPU with it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]
from shapes import SHAPES, build_random_model, param_count  # noqa: E402

from bench.packing import fixed_lengths, lognormal_lengths, make_batch, measure, table  # noqa: E402
from reasoning_rl.policy import Policy  # noqa: E402

PEAK_FLOPS = 790e12  # bf16 dense, the measured figure for this H200 kind (update_probe.py)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def useful_flops(shape: str, prompt: int, response_lens: list[int]) -> float:
    """fwd+bwd FLOPs of the real tokens: 6 N per token + causal attention within each sequence."""
    s = SHAPES[shape]
    seqs = [prompt + r for r in response_lens]
    return 6.0 * param_count(shape) * sum(seqs) + 6.0 * s["num_hidden_layers"] * s["hidden_size"] * sum(
        n * n for n in seqs
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="tiny shape on CPU (the CPU test of this script)")
    ap.add_argument("--budget", type=int, default=None, help="micro_batch_tokens (default 32768; tiny 1024)")
    ap.add_argument("--sequences", type=int, default=None, help="sequences per step (default 64; tiny 16)")
    ap.add_argument("--checkpointing", action="store_true", help="activation checkpointing on")
    ap.add_argument(
        "--repeats", type=int, default=1, help="timed rounds after the warm-up (the call has 10 min)"
    )
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    shape = "tiny" if args.tiny else "qwen15"
    n = args.sequences or (16 if args.tiny else 64)
    budget = args.budget or (1024 if args.tiny else 32768)
    prompt, median, cap = (32, 64, 512) if args.tiny else (512, 2048, 16384)
    lens = lognormal_lengths(n, median=median, sigma=1.0, cap=cap)
    model_dir = build_random_model(
        shape, Path(tempfile.mkdtemp(prefix=f"packing-{shape}-")), max_positions=prompt + cap + 64
    )
    policy = Policy.from_pretrained(
        str(model_dir),
        dtype="bfloat16" if cuda else "float32",
        lr=1e-6,
        micro_batch_tokens=budget,
        activation_checkpointing=args.checkpointing,
    )
    vocab = int(policy.lm.config.vocab_size)
    varied, fixed = make_batch(lens, prompt, vocab), make_batch(fixed_lengths(lens), prompt, vocab)
    runs = [
        ("log-normal", varied, lens, "off", "sdpa"),
        ("log-normal", varied, lens, "on", "sdpa"),
        ("log-normal", varied, lens, "auto", "sdpa"),
        ("log-normal", varied, lens, "on", "flex_attention"),
        ("log-normal", varied, lens, "auto", "flex_attention"),
        ("fixed length, same tokens", fixed, fixed_lengths(lens), "off", "sdpa"),
    ]
    rows: list[dict[str, Any]] = []
    for run, batch, resp, packing, attn in runs:
        if attn == "flex_attention" and not cuda:
            print(f"skipped {run} {packing} {attn}: FlexAttention has no CPU backward", flush=True)
            continue
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            row = {"run": run, **measure(policy, batch, packing, repeats=args.repeats, sync=sync, attn=attn)}
        except torch.OutOfMemoryError as e:  # report it and go on: the other layouts may fit
            print(f"OOM {run} {packing} {attn}: {str(e).splitlines()[0]}", flush=True)
            rows.append({"run": run, "packing": packing, "attn": attn, "error": "CUDA OOM"})
            continue
        row["update_mfu"] = (
            round(useful_flops(shape, prompt, resp) / row["step_s"] / PEAK_FLOPS, 3) if cuda else 0.0
        )
        row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 1) if cuda else 0.0
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = [r for r in rows if "error" not in r]
    base = next((r for r in ok if r["run"].startswith("fixed")), None)
    for r in ok:
        r["vs_fixed"] = round(r["step_tokens_per_s"] / base["step_tokens_per_s"], 3) if base else None
    result = {
        "workload": {
            "shape": shape,
            "sequences": n,
            "prompt_tokens": prompt,
            "response_lengths": f"log-normal median {median}, sigma 1.0, cap {cap}, seed 0",
            "response_mean": round(sum(lens) / n, 1),
            "response_max": max(lens),
            "tokens": varied.num_tokens,
            "micro_batch_tokens": budget,
            "activation_checkpointing": args.checkpointing,
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "torch": torch.__version__,
        },
        "rows": rows,
    }
    print(table(ok))
    print("| run | layout | update MFU | peak GiB | tokens/s vs fixed |\n|---|---|---|---|---|")
    for r in ok:
        print(
            f"| {r['run']} | {r['packing']}, {r['attn']} | {r['update_mfu']} | {r['peak_mem_gib']} | {r['vs_fixed']} |"
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "packing.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
