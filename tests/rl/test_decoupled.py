"""Decoupled PPO (algorithms/decoupled.py) on hand-computed cases: the behaviour weight pi_prox/mu (truncated,
MIS-masked), the clipped ratio against the proximal policy, the loss, its gradient and the ESS."""

from __future__ import annotations

import math

import pytest
import torch

from reasoning_rl.algorithms import LossConfig, policy_loss
from reasoning_rl.algorithms.decoupled import behaviour_weights, effective_sample_size
from reasoning_rl.config import RolloutCorrectionConfig

LOG = math.log
# one sample of two tokens: proximal 0.5, 0.25; behaviour 0.25, 0.5 (pi_prox/mu = 2, 0.5); current 0.6, 0.2
PROX = torch.tensor([[LOG(0.5), LOG(0.25)]])
BEHAV = torch.tensor([[LOG(0.25), LOG(0.5)]])
THETA = [LOG(0.6), LOG(0.2)]
MASK = torch.ones(1, 2, dtype=torch.bool)
CLIP = LossConfig(clip_low=0.1, clip_high=0.1, loss_agg="token-mean")


def loss_and_grad(cap: float | None) -> tuple[float, list[float], dict[str, float]]:
    w, stats = behaviour_weights(PROX, BEHAV, MASK, RolloutCorrectionConfig(tis_cap=cap))
    theta = torch.tensor([THETA], requires_grad=True)
    loss, _ = policy_loss(theta, PROX, torch.tensor([1.0]), MASK, CLIP, token_weights=w)
    loss.backward()
    return float(loss), theta.grad[0].tolist(), stats  # type: ignore[index]


def test_decoupled_loss_matches_hand_values() -> None:
    # r = pi_theta/pi_prox = 1.2, 0.8 -> clipped to 1.1 (A > 0: min(1.2, 1.1) = 1.1), 0.8 stays (min(0.8, 0.9))
    # w = 2, 0.5; token-mean: -(2 * 1.1 + 0.5 * 0.8) / 2 = -1.3
    loss, grad, stats = loss_and_grad(cap=3.0)
    assert loss == pytest.approx(-1.3, abs=1e-6)
    # gradient w.r.t. log pi_theta: 0 on the clipped token, -w r A / N = -0.5 * 0.8 / 2 on the other
    assert grad == pytest.approx([0.0, -0.2], abs=1e-6)
    # ESS = (2 + 0.5)^2 / (2 * (4 + 0.25)) = 6.25 / 8.5
    assert stats["decoupled/ess"] == pytest.approx(6.25 / 8.5, abs=1e-6)


def test_truncation_is_the_tis_cap() -> None:
    loss, _, stats = loss_and_grad(cap=1.5)  # w = 1.5, 0.5: -(1.65 + 0.4) / 2
    assert loss == pytest.approx(-1.025, abs=1e-6)
    assert stats["correction/tis_clipped_frac"] == pytest.approx(0.5)


def test_mis_drops_a_sequence_whose_behaviour_ratio_is_out_of_range() -> None:
    prox = torch.tensor([[LOG(0.5), LOG(0.25)], [LOG(0.8), LOG(0.8)]])
    behav = torch.tensor([[LOG(0.25), LOG(0.5)], [LOG(0.2), LOG(0.2)]])  # row 1: ratio 4 per token
    w, stats = behaviour_weights(
        prox, behav, torch.ones(2, 2, dtype=torch.bool), RolloutCorrectionConfig(tis_cap=None, mis=True)
    )
    # row 0's geometric-mean ratio is sqrt(2 * 0.5) = 1: kept, untruncated; row 1's is 4 > mis_high = 2
    assert w.flatten().tolist() == pytest.approx([2.0, 0.5, 0.0, 0.0])
    assert stats["correction/mis_dropped_frac"] == pytest.approx(0.5)


def test_ess_ignores_padding_and_is_one_for_equal_weights() -> None:
    mask = torch.tensor([[True, True, False]])
    assert effective_sample_size(torch.tensor([[0.7, 0.7, 99.0]]), mask) == pytest.approx(1.0)
    assert effective_sample_size(torch.tensor([[1.0, 0.0, 5.0]]), mask) == pytest.approx(0.5)
