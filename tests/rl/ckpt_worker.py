"""Sharded checkpoint round trips: under torchrun (FSDP2, gloo) or in-process (one rank, plain modules).

``save DIR``: one policy + critic train step, ``save_sharded(DIR/...)``, record the state, then one more step
(the run as it goes on without a save/load). ``load DIR``: fresh models, ``load_sharded``, record the state,
then the same next step. ``both DIR``: save, then load into fresh models in the same processes.
Rank r trains on rows r, r + W, ... of the fixed batch, so every world size trains on the same data.
Rank 0 writes the records to OUT (``torch.save``): full params, full optimizer state, step, lr, next step.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import torch

from reasoning_rl import dist
from reasoning_rl.algorithms import LossConfig, compute_advantages
from reasoning_rl.policy import Critic, Policy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fsdp_worker import fixed_batch  # noqa: E402


def build(model_dir: str) -> tuple[Policy, Critic]:
    kw: dict[str, Any] = dict(lr=1e-3, warmup_steps=2, total_steps=10, micro_batch_tokens=20)
    return Policy.from_pretrained(model_dir, **kw), Critic.from_pretrained(model_dir, **kw)


def train(policy: Policy, critic: Critic) -> dict[str, float]:
    batch, rewards = fixed_batch()
    adv = compute_advantages("grpo", rewards, torch.arange(len(batch)) // 4)
    rows = list(range(dist.rank(), len(batch), dist.world_size()))
    shard = batch.select(rows)
    old, _ = policy.logprobs(shard)
    metrics = policy.train_step(shard, adv[rows], old - 0.2 * shard.response_mask, None, LossConfig())
    returns = shard.response_mask.float()
    metrics["value_loss"] = critic.train_step(shard, returns, critic.values(shard))["value_loss"]
    return metrics


def full_state(module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Unsharded weights and optimizer state on CPU (rank 0 under FSDP2). Collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    model, optim = get_state_dict(
        module, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    return copy.deepcopy({"model": model, "optim": optim})  # without FSDP these are the live tensors


def record(policy: Policy, critic: Critic) -> dict[str, Any]:
    out = {
        "policy": full_state(policy.module, policy.optimizer),
        "critic": full_state(critic.module, critic.optimizer),
        "step": policy.step,
        "lr": policy.optimizer.param_groups[0]["lr"],
        "critic_lr": critic.optimizer.param_groups[0]["lr"],
    }
    out["next_metrics"] = train(policy, critic)
    out["next_policy"] = full_state(policy.module, policy.optimizer)["model"]
    out["next_critic"] = full_state(critic.module, critic.optimizer)["model"]
    return out


def save(model_dir: str, directory: Path) -> dict[str, Any]:
    policy, critic = build(model_dir)
    train(policy, critic)
    policy.save_sharded(directory / "policy")
    critic.save_sharded(directory / "critic")
    return record(policy, critic)


def load(model_dir: str, directory: Path) -> dict[str, Any]:
    policy, critic = build(model_dir)
    policy.load_sharded(directory / "policy")
    critic.load_sharded(directory / "critic")
    return record(policy, critic)


def run(mode: str, model_dir: str, directory: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"world": dist.world_size()}
    if mode in ("save", "both"):
        out["save"] = save(model_dir, directory)
    if mode in ("load", "both"):
        out["load"] = load(model_dir, directory)
    return out


if __name__ == "__main__":
    mode, model_dir, directory, out_path = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    dist.init()
    result = run(mode, model_dir, directory)
    if dist.is_main():
        torch.save(result, out_path)
    dist.destroy()
