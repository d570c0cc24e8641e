"""Gradient checkpointing (model.gradient_checkpointing): the layers really are recomputed in backward, and
the loss and gradients are those of the plain run. (CPU offload and the offloaded reference: test_comm.py.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.wrap import decoder_layers  # noqa: E402


def step(model_dir: str, checkpointing: bool) -> tuple[dict[str, float], dict[str, torch.Tensor], int]:
    """One train step with SGD (the update is the gradient, scaled); returns metrics, weights, layer forwards."""
    policy = Policy.from_pretrained(model_dir, lr=1e-3, micro_batch_tokens=30, activation_checkpointing=checkpointing)
    policy.optimizer = torch.optim.SGD(policy.module.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    batch = TokenBatch([torch.randint(7, 90, (6 + i,), generator=g) for i in range(6)], [3] * 6)
    adv = compute_advantages("grpo", torch.rand(6, generator=g), torch.arange(6) // 3)
    calls = [0]
    for layer in decoder_layers(policy.lm):
        layer.register_forward_pre_hook(lambda m, a: calls.__setitem__(0, calls[0] + 1))
    metrics = policy.train_step(batch, adv, None, None, LossConfig(entropy_coef=0.01))
    weights = {n: p.detach().clone() for n, p in policy.lm.named_parameters()}
    return metrics, weights, calls[0]


def test_gradient_checkpointing_recomputes_layers_and_gives_the_same_step(tiny_model_dir) -> None:
    plain, w_plain, n_plain = step(str(tiny_model_dir), False)
    ckpt, w_ckpt, n_ckpt = step(str(tiny_model_dir), True)
    assert n_ckpt == 2 * n_plain > 0  # every layer forward ran again in backward
    for key in ("loss", "pg_loss", "entropy", "grad_norm"):
        assert ckpt[key] == pytest.approx(plain[key], rel=1e-6, abs=1e-8), key
    for n, p in w_plain.items():
        assert torch.allclose(p, w_ckpt[n], rtol=1e-6, atol=1e-8), n
