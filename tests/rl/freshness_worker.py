"""The freshness gate through the per-rank hand-off, under torchrun (FSDP2, gloo): every rank holds its own
HF engine. Hand-off 1 is correct; in hand-off 2 rank 1's engine silently drops a tensor. Every rank must
raise WeightSyncError (none may hang in a collective), rank 1 naming the tensor. Writes one JSON per rank."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from reasoning_rl import dist
from reasoning_rl.algorithms import LossConfig
from reasoning_rl.freshness import FreshnessGate, Probe, WeightSyncError
from reasoning_rl.handoff import push_weights
from reasoning_rl.policy import Policy, TokenBatch
from reasoning_rl.rollout.hf_engine import HFEngine

DROPPED = "model.layers.1.self_attn.o_proj.weight"


def main(model_dir: str, out_dir: str) -> None:
    dist.init()
    rank = dist.rank()
    policy = Policy.from_pretrained(model_dir, lr=1e-2, micro_batch_tokens=256)
    assert policy.fsdp, "the worker must exercise sharded parameters"
    engine = HFEngine(model_dir, dtype="float32", device="cpu")
    gate = FreshnessGate(Probe.from_prompts([[7 + k % 50 for k in range(20)]]))
    g = torch.Generator().manual_seed(rank)
    report: dict[str, object] = {"rank": rank, "world": dist.world_size()}
    for step in (1, 2):
        batch = TokenBatch([torch.randint(7, 90, (16,), generator=g) for _ in range(2)], [8, 8])
        policy.train_step(batch, torch.randn(2, generator=g), None, None, LossConfig())
        if step == 2 and rank == 1:
            good = engine.load_weights
            engine.load_weights = lambda it, *, version, good=good: good(
                ((n, t) for n, t in it if n != DROPPED), version=version
            )  # type: ignore[method-assign]
        try:
            stats = push_weights(policy, engine, gate=gate, version=step)
            report[f"step{step}"] = {"ok": True, "probe_gap": stats.check.probe_gap if stats.check else None}
        except WeightSyncError as exc:
            report[f"step{step}"] = {"ok": False, "error": str(exc)}
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
