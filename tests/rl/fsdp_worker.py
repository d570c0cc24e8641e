"""One training step on a fixed batch; run under torchrun (FSDP2, gloo) or in-process (single rank).

Writes loss/metrics and the updated full weights to ``out`` (rank 0) so the test can compare runs.
Rank r trains on rows r, r + W, ... of the batch: the DP shards together are exactly the batch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from reasoning_rl import dist
from reasoning_rl.algorithms import LossConfig, compute_advantages
from reasoning_rl.handoff import push_weights
from reasoning_rl.policy import Policy, TokenBatch


def fixed_batch(vocab: int = 90, n: int = 8) -> tuple[TokenBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(123)
    seqs, plens = [], []
    for i in range(n):
        p = 3 + i % 4
        r = 2 + (5 * i) % 9
        seqs.append(torch.randint(7, vocab, (p + r,), generator=g))
        plens.append(p)
    rewards = torch.rand(n, generator=g)
    return TokenBatch(seqs, plens), rewards


def run(
    model_dir: str,
    *,
    micro_batch_tokens: int,
    agg: str = "token-mean",
    lora_rank: int = 0,
    packing: str = "off",
) -> dict[str, Any]:
    """``lora_rank`` > 0: train LoRA adapters of that rank instead of the whole model."""
    from reasoning_rl.config import LoraConfig

    world, rank = dist.world_size(), dist.rank()
    policy = Policy.from_pretrained(
        model_dir,
        lr=1e-3,
        grad_clip=1.0,
        micro_batch_tokens=micro_batch_tokens,
        lora=LoraConfig(rank=lora_rank) if lora_rank else None,
        packing=packing,  # type: ignore[arg-type]
    )
    batch, rewards = fixed_batch()
    adv = compute_advantages("grpo", rewards, torch.arange(len(batch)) // 4)
    rows = list(range(rank, len(batch), world))
    shard = batch.select(rows)
    old, _ = policy.logprobs(shard)
    old = old - 0.3 * shard.response_mask  # off-policy: ratio e^0.3 > 1.28, so A>0 tokens get clipped
    ref = old + 0.1
    cfg = LossConfig(clip_high=0.28, kl_coef=0.05, entropy_coef=0.01, loss_agg=agg)
    metrics = policy.train_step(shard, adv[rows], old, ref, cfg)
    engine = None
    if dist.is_main():
        from reasoning_rl.rollout.hf_engine import HFEngine

        engine = HFEngine(model_dir, dtype="float32", device="cpu")
    stats = push_weights(policy, engine, version=1, bucket_bytes=64 << 10)
    full = {name: t.clone() for bucket in policy.iter_full_params() for name, t in bucket}
    out: dict[str, Any] = {
        "metrics": metrics,
        "optimizer_params": sum(p.numel() for g in policy.optimizer.param_groups for p in g["params"]),
        "params": full,
        "handoff_tensors": stats.tensors,
        "world": world,
    }
    if engine is not None:
        out["engine_params"] = {n: p.detach().clone() for n, p in engine.model.named_parameters()}
    return out


if __name__ == "__main__":
    model_dir, out_path, budget = sys.argv[1], sys.argv[2], int(sys.argv[3])
    layout = sys.argv[4] if len(sys.argv) > 4 else "off"  # a LoRA rank (digits) or an algorithm.packing mode
    lora_rank, packing = (int(layout), "off") if layout.isdigit() else (0, layout)
    dist.init()
    result = run(model_dir, micro_batch_tokens=budget, lora_rank=lora_rank, packing=packing)
    if dist.is_main():
        torch.save(result, Path(out_path))
    dist.destroy()
