"""TIS / MIS and the mismatch metrics on hand-computed cases (log-ratios chosen so the answers are exact)."""

from __future__ import annotations

import math

import pytest
import torch

from reasoning_rl.algorithms import LossConfig, policy_loss
from reasoning_rl.algorithms.rollout_correction import (
    correction_weights,
    mis_keep,
    mismatch_metrics,
    sequence_ratio,
    tis_weights,
)
from reasoning_rl.config import RolloutCorrectionConfig

# trainer-old minus rollout log-probs: row 0 has ratios 0.5, 1.5, 3; row 1 has ratio 4, then two padding
# positions holding garbage that must never count
OLD = torch.tensor([[math.log(0.5), math.log(1.5), math.log(3.0)], [math.log(4.0), 123.0, -7.0]])
ROLLOUT = torch.zeros(2, 3)
MASK = torch.tensor([[True, True, True], [True, False, False]])


def test_tis_truncates_each_token_ratio_at_the_cap():
    w = tis_weights(OLD, ROLLOUT, MASK.float(), cap=2.0)
    assert torch.allclose(w, torch.tensor([[0.5, 1.5, 2.0], [2.0, 0.0, 0.0]]), atol=1e-6)


def test_sequence_ratio_product_and_geometric_mean():
    assert torch.allclose(sequence_ratio(OLD, ROLLOUT, MASK.float(), "sequence"), torch.tensor([2.25, 4.0]))
    geo = sequence_ratio(OLD, ROLLOUT, MASK.float(), "geometric")
    assert torch.allclose(geo, torch.tensor([2.25 ** (1 / 3), 4.0]), atol=1e-6)  # 1.3104, 4
    assert mis_keep(OLD, ROLLOUT, MASK.float(), 0.5, 2.0, "geometric").tolist() == [True, False]
    assert mis_keep(OLD, ROLLOUT, MASK.float(), 0.5, 2.0, "sequence").tolist() == [False, False]  # 2.25 > 2
    assert mis_keep(OLD, ROLLOUT, MASK.float(), 0.5, 5.0, "sequence").tolist() == [True, True]


def test_correction_weights_combine_tis_and_mis():
    w, stats = correction_weights(OLD, ROLLOUT, MASK, RolloutCorrectionConfig(tis_cap=2.0, mis=True))
    assert torch.allclose(w, torch.tensor([[0.5, 1.5, 2.0], [0.0, 0.0, 0.0]]), atol=1e-6)
    assert stats["correction/tis_clipped_frac"] == pytest.approx(2 / 4)  # ratios 3 and 4 exceed 2
    assert stats["correction/mis_dropped_frac"] == pytest.approx(1 / 2)
    assert stats["correction/weight_mean"] == pytest.approx(4.0 / 4)
    w_mis_only, _ = correction_weights(OLD, ROLLOUT, MASK, RolloutCorrectionConfig(tis_cap=None, mis=True))
    assert w_mis_only.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


def test_mismatch_metrics_by_hand():
    m = mismatch_metrics(OLD, ROLLOUT, MASK, threshold=0.5)
    ds = [math.log(0.5), math.log(1.5), math.log(3.0), math.log(4.0)]
    k3 = [math.expm1(d) - d for d in ds]  # 0.1931, 0.0945, 0.9014, 1.6137
    assert m["mismatch/kl"] == pytest.approx(sum(k3) / 4, rel=1e-5)  # 0.70068
    assert m["mismatch/kl"] == pytest.approx(0.70068, abs=1e-4)
    assert m["mismatch/k1"] == pytest.approx(sum(ds) / 4, rel=1e-5)
    assert m["mismatch/max_abs"] == pytest.approx(math.log(4.0), rel=1e-6)
    assert m["mismatch/frac_over"] == pytest.approx(3 / 4)  # |log 1.5| = 0.405 is under 0.5
    assert mismatch_metrics(OLD, ROLLOUT, torch.zeros_like(MASK)) == {}


def test_identical_logprobs_mean_no_mismatch_and_unit_weights():
    lp = torch.randn(3, 5)
    mask = torch.ones(3, 5, dtype=torch.bool)
    m = mismatch_metrics(lp, lp, mask)
    assert m["mismatch/kl"] == 0.0 and m["mismatch/max_abs"] == 0.0 and m["mismatch/frac_over"] == 0.0
    w, _ = correction_weights(lp, lp, mask, RolloutCorrectionConfig(mis=True))
    assert torch.equal(w, torch.ones(3, 5))


def test_policy_loss_scales_each_token_by_its_weight():
    """Ratio 1, advantage 1: each token's term is -1, so token-mean over 4 real tokens is -sum(w)/4."""
    lp = torch.zeros(2, 3, requires_grad=True)
    w = torch.tensor([[0.5, 1.5, 2.0], [2.0, 0.0, 0.0]])
    plain, _ = policy_loss(lp, lp.detach(), torch.ones(2), MASK, LossConfig())
    weighted, _ = policy_loss(lp, lp.detach(), torch.ones(2), MASK, LossConfig(), token_weights=w)
    assert float(plain.detach()) == pytest.approx(-1.0)
    assert float(weighted.detach()) == pytest.approx(-(0.5 + 1.5 + 2.0 + 2.0) / 4)
    weighted.backward()
    assert lp.grad is not None and torch.allclose(lp.grad, -w / 4)  # the gradient is weighted the same way


def test_bad_correction_config():
    with pytest.raises(ValueError, match=r"tis_cap\n.*greater than 0"):
        RolloutCorrectionConfig(tis_cap=0.0)
    with pytest.raises(ValueError, match=r"mis_high\n.*greater than 1"):
        RolloutCorrectionConfig(mis_low=0.5, mis_high=0.9)
