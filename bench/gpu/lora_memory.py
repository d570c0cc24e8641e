"""Peak GPU memory and tokens/s of one GRPO-style update, full fine-tuning vs LoRA, through our ``Policy``.

    python bench/gpu/lora_memory.py [--tiny] [--rank 32] [--rows 8] [--seq 2048] [--out DIR]

A random-init Qwen2.5-1.5B-shaped model (its config built with transformers, nothing downloaded) is written
once to a temporary dir; then, for full fine-tuning and for LoRA (rank ``--rank``, all linear layers, alpha 32),
with and without activation checkpointing, one ``Policy.train_step`` (forward + backward + AdamW, bf16 compute
on CUDA with FSDP2 as a run places it) over ``--rows`` sequences of ``--seq`` tokens (a quarter prompt) is timed
after a warm-up step. Prints a table and writes ``lora_memory.json`` to ``--out`` (default: ``$OUT``, else
``bench/out``). ``--tiny``: a 2-layer model and short sequences, so the script runs on CPU (no memory figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from reasoning_rl import model_shapes  # noqa: E402
from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.config import LoraConfig  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402

# Qwen2.5-1.5B (config.json of Qwen/Qwen2.5-1.5B), and a CPU-sized stand-in of the same family.
QWEN25_15B: dict[str, Any] = dict(
    model_shapes.QWEN25_1_5B, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6
)
TINY: dict[str, Any] = dict(model_shapes.TINY, max_position_embeddings=1024)


def build_model(shape: dict[str, Any], out: Path) -> Path:
    """Random-init Qwen2 weights (bf16 on disk) + config; no tokenizer is needed to train on token ids."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**shape)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    del model
    return out


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def optimizer_state_bytes(policy: Policy) -> int:
    total = 0
    for state in policy.optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                local = value.to_local() if hasattr(value, "to_local") else value
                total += local.numel() * local.element_size()
    return total


def measure(
    model_dir: Path, *, lora_rank: int, checkpointing: bool, rows: int, seq: int, mb_tokens: int, steps: int
) -> dict[str, Any]:
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    base_mem = torch.cuda.memory_allocated() if cuda else 0
    policy = Policy.from_pretrained(
        str(model_dir),
        dtype="bfloat16" if cuda else "float32",
        lr=1e-5 if lora_rank else 1e-6,
        micro_batch_tokens=mb_tokens,
        activation_checkpointing=checkpointing,
        lora=LoraConfig(rank=lora_rank) if lora_rank else None,
    )
    g = torch.Generator().manual_seed(7)
    vocab = policy.lm.config.vocab_size
    prompt = seq // 4
    batch = TokenBatch([torch.randint(3, vocab, (seq,), generator=g) for _ in range(rows)], [prompt] * rows)
    adv = compute_advantages("grpo", torch.rand(rows, generator=g), torch.arange(rows) // 4)
    old = torch.full(batch.shape, -12.0)  # off-policy old log-probs: the clipped ratio path runs too
    times = []
    for _ in range(steps + 1):  # the first is a warm-up (allocator, kernels)
        sync()
        t0 = time.perf_counter()
        policy.train_step(batch, adv, old, None, LossConfig(skip_zero_advantage=False))
        sync()
        times.append(time.perf_counter() - t0)
    step = statistics.median(times[1:])
    trainable = sum(p.numel() for p in policy.trainable_parameters())
    total = sum(p.numel() for p in policy.module.parameters())
    result: dict[str, Any] = {
        "setting": f"lora r={lora_rank}" if lora_rank else "full",
        "checkpointing": checkpointing,
        "trainable_params": trainable,
        "params": total,
        "optimizer_state_gib": round(optimizer_state_bytes(policy) / 2**30, 3),
        "step_s": round(step, 3),
        "tokens_per_s": round(rows * seq / step),
        "peak_gpu_mem_gib": round((torch.cuda.max_memory_allocated() - base_mem) / 2**30, 2)
        if cuda
        else None,
    }
    del policy
    gc.collect()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="2-layer model, short sequences (runs on CPU)")
    parser.add_argument("--rank", type=int, default=32, help="LoRA rank (all linear layers)")
    parser.add_argument("--rows", type=int, default=8, help="sequences per update")
    parser.add_argument("--seq", type=int, default=None, help="tokens per sequence [2048; --tiny: 64]")
    parser.add_argument("--micro-batch-tokens", type=int, default=8192, help="algorithm.micro_batch_tokens")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up (median)")
    parser.add_argument("--out", type=Path, default=None, help="dir for lora_memory.json [$OUT or bench/out]")
    args = parser.parse_args(argv)
    seq = args.seq or (64 if args.tiny else 2048)
    out = args.out or Path(os.environ.get("OUT") or REPO / "bench" / "out")
    out.mkdir(parents=True, exist_ok=True)
    shape = TINY if args.tiny else QWEN25_15B
    results = []
    with tempfile.TemporaryDirectory(prefix="rrl-lora-bench-") as tmp:
        model_dir = build_model(shape, Path(tmp) / "model")
        for checkpointing in (False, True):
            for rank in (0, args.rank):
                r = measure(
                    model_dir,
                    lora_rank=rank,
                    checkpointing=checkpointing,
                    rows=args.rows,
                    seq=seq,
                    mb_tokens=args.micro_batch_tokens,
                    steps=args.steps,
                )
                results.append(r)
                print(json.dumps(r), flush=True)
    header = f"{'setting':<12} {'ckpt':<5} {'trainable':>13} {'optim GiB':>10} {'step s':>8} {'tok/s':>9} {'peak GiB':>9}"
    print(f"\n{'tiny' if args.tiny else 'Qwen2.5-1.5B'} shape, {args.rows} x {seq} tokens, one update")
    print(header)
    for r in results:
        peak = "n/a" if r["peak_gpu_mem_gib"] is None else f"{r['peak_gpu_mem_gib']:.2f}"
        print(
            f"{r['setting']:<12} {'on' if r['checkpointing'] else 'off':<5} {r['trainable_params']:>13,} "
            f"{r['optimizer_state_gib']:>10.3f} {r['step_s']:>8.3f} {r['tokens_per_s']:>9,} {peak:>9}"
        )
    ratios = {}
    for ckpt in (False, True):
        full, lora = (r for r in results if r["checkpointing"] == ckpt)
        if full["peak_gpu_mem_gib"] and lora["peak_gpu_mem_gib"] is not None:
            ratios[f"checkpointing_{'on' if ckpt else 'off'}"] = round(
                lora["peak_gpu_mem_gib"] / full["peak_gpu_mem_gib"], 3
            )
    if ratios:
        print("LoRA / full peak memory:", ratios, "(acceptance: <= 0.6)")
    summary = {
        "shape": "tiny" if args.tiny else "qwen2.5-1.5b",
        "rows": args.rows,
        "seq": seq,
        "micro_batch_tokens": args.micro_batch_tokens,
        "lora_rank": args.rank,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "results": results,
        "peak_ratio_lora_over_full": ratios,
    }
    (out / "lora_memory.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {out / 'lora_memory.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
