"""PPO in the trainer: token rewards + GAE, the critic trained alongside the policy, and checkpointed with it."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.test_train_e2e import config, metrics, train


def _components(model: Path, seed: int) -> Any:
    from reasoning_rl.config import Config
    from reasoning_rl.factory import Models
    from reasoning_rl.policy import Critic, Policy
    from reasoning_rl.trainer.build import Components
    from reasoning_rl.trainer.plan import step_plan

    torch.manual_seed(seed)  # the value head's init comes from the global RNG
    policy = Policy.from_pretrained(str(model), lr=1e-3)
    critic = Critic.from_pretrained(str(model), lr=1e-2)
    cfg = Config.model_validate(
        {
            "model": {"path": str(model)},
            "algorithm": {"name": "ppo"},
            "data": {"train": {"generator": "fixed_digit", "size": 4}},
        }
    )
    return Components(
        cfg,
        "cpu",
        model,
        None,
        Models(policy, None, critic),
        None,
        None,
        [],
        [],
        None,
        True,
        step_plan(cfg, pad_id=0),
    )


def test_checkpoint_round_trip_restores_critic(tmp_path: Path, tiny_model_dir: Path) -> None:
    from reasoning_rl.config import ConfigError
    from reasoning_rl.policy import TokenBatch

    g = torch.Generator().manual_seed(0)
    batch = TokenBatch([torch.randint(7, 90, (6 + i,), generator=g) for i in range(4)], [3] * 4)
    returns = batch.response_mask.float()
    a = _components(tiny_model_dir, seed=0)
    a.models.critic.train_step(
        batch, returns, a.models.critic.values(batch)
    )  # optimizer moments + scheduler step to restore
    a.save_checkpoint(tmp_path)
    assert (tmp_path / "policy" / ".metadata").exists() and (tmp_path / "critic" / ".metadata").exists()

    b = _components(tiny_model_dir, seed=1)
    assert not torch.allclose(a.models.critic.values(batch), b.models.critic.values(batch))
    b.load_checkpoint(tmp_path)
    torch.testing.assert_close(a.models.critic.values(batch), b.models.critic.values(batch), rtol=0, atol=0)
    # the next step is identical too: AdamW moments and the scheduler came back with the weights
    ma = a.models.critic.train_step(batch, returns, a.models.critic.values(batch))
    mb = b.models.critic.train_step(batch, returns, b.models.critic.values(batch))
    assert ma == mb
    torch.testing.assert_close(a.models.critic.values(batch), b.models.critic.values(batch), rtol=0, atol=0)

    shutil.rmtree(tmp_path / "critic")  # a GRPO checkpoint cannot resume a PPO run
    with pytest.raises(ConfigError, match=r"critic/"):
        b.load_checkpoint(tmp_path)


@pytest.mark.slow
def test_ppo_learns_tiny_task_and_critic_fits(tmp_path: Path, tiny_model_dir: Path) -> None:
    """PPO (critic + GAE, HF engine) must lift 'answer contains 7' from chance to >= 0.9 while the critic's
    value loss falls; the final checkpoint carries the critic."""
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "ppo",
        algorithm={"name": "ppo"},
        optim={"lr": 0.01, "critic_lr": 0.001},
        rollout={"engine": "hf", "n": 16, "max_tokens": 6},
        trainer={"steps": 15, "batch_size": 4},
    )
    train(cfg, timeout=600)
    rows = [r for r in metrics(tmp_path / "ppo") if "reward/mean" in r]
    rewards = [r["reward/mean"] for r in rows]
    losses = [r["critic/value_loss"] for r in rows]
    assert sum(rewards[:2]) / 2 < 0.3, rewards
    reached = next((r["step"] for r in rows if r["reward/mean"] >= 0.9), None)
    assert reached is not None, f"reward never reached 0.9: {rewards}"
    assert sum(losses[-3:]) / 3 < 0.5 * losses[0], losses
    assert any("critic/explained_variance" in r for r in rows)
    assert all(r["critic/grad_norm"] > 0 for r in rows)
    assert (tmp_path / "ppo" / "checkpoints" / "step_15" / "critic" / ".metadata").exists()
    print(
        f"PPO: reward >= 0.9 at step {reached}; curve {[round(x, 2) for x in rewards]}; "
        f"value loss {[round(x, 3) for x in losses]}"
    )
