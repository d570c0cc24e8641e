"""FSDP2 parity and update throughput: the same batches trained on 1 rank and on N ranks (torchrun).

    torchrun --nproc_per_node N bench/gpu/fsdp2_parity.py SHAPE STEPS BATCH SEQ OUT.json

Every rank builds the same random batches; rank r trains on rows r, r+N, ... so the shards together are
exactly the 1-rank batch. Prints per-step loss, step time, tokens/s and update MFU (peak = 790 TFLOP/s
bf16, measured on this H200 kind).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import build_random_model, train_flops  # noqa: E402

from reasoning_rl import dist  # noqa: E402
from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402

PEAK_FLOPS = 790e12


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def batches(
    steps: int, n: int, seq: int, vocab: int, prompt: int = 128
) -> list[tuple[TokenBatch, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    out = []
    for _ in range(steps):
        seqs = [torch.randint(3, vocab, (seq,), generator=g) for _ in range(n)]
        out.append((TokenBatch(seqs, [min(prompt, seq // 3)] * n), torch.rand(n, generator=g)))
    return out


def main() -> None:
    shape, steps, n, seq, out_path = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        int(sys.argv[4]),
        sys.argv[5],
    )
    dist.init()
    world, rank = dist.world_size(), dist.rank()
    model_dir = Path(f"/tmp/rrl_bench/{shape}")
    if dist.is_main():
        build_random_model(shape, model_dir)
    dist.barrier()
    policy = Policy.from_pretrained(
        str(model_dir),
        dtype="bfloat16" if torch.cuda.is_available() else "float32",
        lr=1e-5,
        micro_batch_tokens=32 * seq,
    )
    cfg = LossConfig()
    vocab = policy.lm.config.vocab_size
    rows_of_rank = list(range(rank, n, world))
    losses, times, lp_means = [], [], []
    for batch, rewards in batches(steps, n, seq, vocab):
        adv = compute_advantages("grpo", rewards, torch.arange(n) // 8)
        shard = batch.select(rows_of_rank)
        sync()
        t0 = time.perf_counter()
        old, _ = policy.logprobs(shard)
        mask = shard.response_mask
        sums = dist.all_reduce_sum(torch.tensor([float((old.float().cpu() * mask).sum()), float(mask.sum())]))
        lp_means.append(float(sums[0] / sums[1]))
        metrics = policy.train_step(shard, adv[rows_of_rank], old, None, cfg)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(metrics["loss"])
    if dist.is_main():
        warm = sorted(times[1:] or times)
        step_s = warm[len(warm) // 2]
        tokens = n * seq
        # logprobs (fwd, 2N) + train step (fwd+bwd, 6N): count both, as the step does both.
        flops = train_flops(shape, tokens, seq) * (8 / 6)
        res = {
            "shape": shape,
            "world": world,
            "batch": n,
            "seq": seq,
            "losses": losses,
            "logprob_mean": lp_means,
            "step_s": times,
            "step_s_median": step_s,
            "tokens_per_s": tokens / step_s,
            "tokens_per_s_per_gpu": tokens / step_s / world,
            "mfu": flops / step_s / (PEAK_FLOPS * world),
            "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        }
        Path(out_path).write_text(json.dumps(res, indent=1))
        print("RESULT " + json.dumps(res), flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
