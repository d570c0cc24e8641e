"""Two supervised steps and an eval on a fixed batch; under torchrun (FSDP2, gloo) or in-process (one rank).

The batch has holes in its loss mask (tool-output tokens inside the response). The optimizer is SGD, so equal
weights after the steps mean equal gradients. Rank r takes rows r, r + W, ...; the normalizer is the loss
tokens of the whole batch, as the SFT driver passes it. Rank 0 writes the metrics and full weights to OUT.
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from reasoning_rl import dist
from reasoning_rl.policy import Policy, TokenBatch
from reasoning_rl.policy.sft import sft_eval, sft_step


def sft_batch(n: int = 8, vocab: int = 90) -> TokenBatch:
    g = torch.Generator().manual_seed(7)
    seqs, plens, masks = [], [], []
    for i in range(n):
        p, r = 2 + i % 3, 3 + (5 * i) % 11
        seqs.append(torch.randint(7, vocab, (p + r,), generator=g))
        plens.append(p)
        masks.append([0 if 1 <= k <= 2 and r > 6 else 1 for k in range(r)])  # a 2-token tool output
    batch = TokenBatch(seqs, plens)
    batch.model_mask = batch.pad(masks, 0).bool()
    return batch


def run(model_dir: str, *, packing: str = "off", micro_batch_tokens: int = 24) -> dict[str, Any]:
    world, rank = dist.world_size(), dist.rank()
    policy = Policy.from_pretrained(
        model_dir,
        lr=1e-2,
        grad_clip=None,
        micro_batch_tokens=micro_batch_tokens,
        packing=packing,  # type: ignore[arg-type]
    )
    policy.optimizer = torch.optim.SGD(policy.trainable_parameters(), lr=0.5)
    batch = sft_batch()
    norm = float(batch.response_mask.sum())
    shard = batch.select(list(range(rank, len(batch), world)))
    shard.model_mask = batch.model_mask[list(range(rank, len(batch), world)), : shard.shape[1]]
    before = sft_eval(policy, shard)  # before any step: FSDP2 not yet set up by a training forward
    steps = [sft_step(policy, shard, norm) for _ in range(2)]
    return {
        "steps": steps,
        "before": before,
        "eval": sft_eval(policy, shard),
        "params": policy.full_state_dict(),
    }


if __name__ == "__main__":
    model_dir, out = sys.argv[1], sys.argv[2]
    result = run(model_dir)
    if dist.is_main():
        result["world"] = dist.world_size()
        torch.save(result, out)
    dist.destroy()
