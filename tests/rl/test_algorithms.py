"""Advantage estimators, KL, losses and aggregation against hand-computed values; split invariance."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from reasoning_rl.algorithms import (  # noqa: E402
    LossConfig,
    aggregate,
    compute_advantages,
    compute_gae,
    compute_normalizer,
    kl_estimate,
    kl_penalized_rewards,
    policy_loss,
    value_loss,
)

S3 = math.sqrt(1 / 3)


def close(a, b, tol=1e-5):
    assert torch.allclose(
        torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol
    ), (a, b)


# ---- advantages ------------------------------------------------------------------------------------
R = torch.tensor([1.0, 0.0, 1.0, 0.0, 5.0])
G = torch.tensor([0, 0, 0, 1, 1])
M = torch.tensor([True, True, True, True, False])  # the 5.0 is a grader error


def test_grpo_hand_values_and_masked_sample_ignored():
    # group 0: mean 2/3, unbiased std sqrt(1/3); group 1 has one valid sample -> no signal; masked -> 0
    close(compute_advantages("grpo", R, G, M), [(1 / 3) / S3, (-2 / 3) / S3, (1 / 3) / S3, 0.0, 0.0])


def test_masked_sample_does_not_shift_group_stats():
    with_err = compute_advantages(
        "grpo", torch.tensor([1.0, 0.0, 1.0, 99.0]), torch.zeros(4), torch.tensor([1, 1, 1, 0]).bool()
    )
    without = compute_advantages("grpo", torch.tensor([1.0, 0.0, 1.0]), torch.zeros(3))
    close(with_err[:3], without)
    assert with_err[3] == 0


def test_drgrpo_no_std_division():
    close(compute_advantages("drgrpo", R, G, M), [1 / 3, -2 / 3, 1 / 3, 0.0, 0.0])


def test_rloo_leave_one_out():
    # 1 - mean(0, 1) = 0.5 ; 0 - mean(1, 1) = -1
    close(compute_advantages("rloo", R, G, M), [0.5, -1.0, 0.5, 0.0, 0.0])


def test_reinforce_pp_batch_whitening():
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 7.0])
    m = torch.tensor([1, 1, 1, 1, 0]).bool()
    # valid mean 0.5, unbiased std sqrt(1/3)
    close(
        compute_advantages("reinforce_pp", r, torch.arange(5), m),
        [0.5 / S3, -0.5 / S3, 0.5 / S3, -0.5 / S3, 0.0],
    )


def test_reinforce_pp_baseline_group_then_batch():
    # group-centred: [.5, -.5, 0, 0]; batch mean 0, unbiased var (0.25+0.25)/3
    std = math.sqrt(0.5 / 3)
    out = compute_advantages(
        "reinforce_pp_baseline", torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    )
    close(out, [0.5 / std, -0.5 / std, 0.0, 0.0])


def test_advantage_errors_are_clear():
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'"):
        compute_advantages("ppo", R, G, M)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="equal length"):
        compute_advantages("grpo", R, G[:3], M)
    with pytest.raises(ValueError, match="NaN"):
        compute_advantages("grpo", torch.tensor([float("nan"), 1.0]), torch.zeros(2))


def test_gae_hand_values():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    adv, ret = compute_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    close(adv, [[0.5, 0.4, 0.3]])
    close(ret, [[1.0, 1.0, 1.0]])
    adv, _ = compute_gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # delta2=.3; delta1=.9*.7-.6=.03 -> .03+.72*.3; delta0=.9*.6-.5=.04 -> .04+.72*gae1
    g1 = 0.03 + 0.72 * 0.3
    close(adv, [[0.04 + 0.72 * g1, g1, 0.3]])


def test_gae_skips_masked_positions():
    adv, ret = compute_gae(
        torch.tensor([[0.0, 9.0, 1.0]]),
        torch.tensor([[0.5, 9.0, 0.7]]),
        torch.tensor([[1.0, 0.0, 1.0]]),
        0.9,
        0.8,
    )
    close(adv, [[0.13 + 0.72 * 0.3, 0.0, 0.3]])  # t=0 bootstraps from t=2's value 0.7
    assert ret[0, 1] == 0


# ---- KL ---------------------------------------------------------------------------------------------
def test_kl_estimators_hand_values():
    lp, ref = torch.tensor([-1.0]), torch.tensor([-2.0])  # log r = 1
    close(kl_estimate(lp, ref, "k1"), [1.0])
    close(kl_estimate(lp, ref, "k2"), [0.5])
    close(kl_estimate(lp, ref, "k3"), [math.exp(-1)])  # e^{-1} - (-1) - 1
    close(kl_estimate(ref, ref, "k3"), [0.0])
    with pytest.raises(ValueError, match="kl_estimator"):
        kl_estimate(lp, ref, "k4")  # type: ignore[arg-type]


def test_kl_in_reward():
    lp = torch.tensor([[-1.0, -1.0], [-1.0, -1.0]])
    ref = torch.tensor([[-2.0, -2.0], [-1.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    close(kl_penalized_rewards(torch.tensor([1.0, 1.0]), lp, ref, mask, 0.1, "k1"), [1.0 - 0.2, 1.0 - 0.05])


# ---- aggregation ------------------------------------------------------------------------------------
V = torch.tensor([[1.0, 2.0, 3.0], [4.0, 100.0, 100.0]])
VM = torch.tensor([[1, 1, 1], [1, 0, 0]]).bool()


def test_aggregation_hand_values():
    close(aggregate(V, VM, "token-mean"), 10 / 4)
    close(aggregate(V, VM, "seq-mean-token-mean"), (2 + 4) / 2)
    close(aggregate(V, VM, "seq-mean-token-sum-norm"), 10 / (2 * 3))
    close(
        aggregate(
            V,
            VM,
            "seq-mean-token-sum-norm",
            compute_normalizer("seq-mean-token-sum-norm", VM, max_response_len=4),
        ),
        10 / 8,
    )
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(V, VM, "mean")  # type: ignore[arg-type]


# ---- policy loss ------------------------------------------------------------------------------------
def one(x: float) -> torch.Tensor:
    return torch.tensor([[x]])


def test_ppo_clip_higher_positive_and_negative_advantage():
    cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    loss, m = policy_loss(one(math.log(1.5)), one(0.0), torch.tensor([1.0]), one(1.0), cfg)
    close(loss, -1.28)  # ratio 1.5 clipped to 1 + 0.28
    close(m["clip_frac"], 1.0)
    loss, m = policy_loss(one(math.log(0.5)), one(0.0), torch.tensor([-1.0]), one(1.0), cfg)
    close(loss, 0.8)  # ratio 0.5 clipped to 1 - 0.2, A = -1
    loss, m = policy_loss(one(math.log(1.1)), one(0.0), torch.tensor([1.0]), one(1.0), cfg)
    close(loss, -1.1)
    close(m["clip_frac"], 0.0)


def test_dual_clip_caps_negative_advantage_loss():
    lp = one(math.log(5.0)).requires_grad_()
    loss, _ = policy_loss(lp, one(0.0), torch.tensor([-1.0]), one(1.0), LossConfig())
    close(loss, 5.0)
    loss, _ = policy_loss(lp, one(0.0), torch.tensor([-1.0]), one(1.0), LossConfig(dual_clip=3.0))
    close(loss, 3.0)
    loss.backward()
    close(lp.grad, [[0.0]])  # the capped branch carries no gradient
    with pytest.raises(ValueError, match="dual_clip"):
        LossConfig(dual_clip=0.5)


def test_gspo_sequence_ratio_and_gradient():
    cfg = LossConfig(ratio="sequence", clip_high=0.28)
    mask = torch.ones(1, 2)
    loss, m = policy_loss(torch.tensor([[0.2, 0.4]]), torch.zeros(1, 2), torch.tensor([1.0]), mask, cfg)
    close(loss, -1.28)  # exp(mean(.2, .4)) = 1.35 -> clipped to 1.28 on both tokens
    close(m["clip_frac"], 1.0)
    lp = torch.tensor([[0.1, -0.1]], requires_grad=True)  # sequence ratio exactly 1 though tokens differ
    loss, m = policy_loss(lp, torch.zeros(1, 2), torch.tensor([2.0]), mask, cfg)
    close(loss, -2.0)
    close(m["clip_frac"], 0.0)
    loss.backward()
    close(lp.grad, [[-1.0, -1.0]])  # d(-A s)/dlogp_t = -A s / |y| summed over the token-mean


def test_entropy_bonus_and_kl_term():
    cfg = LossConfig(entropy_coef=0.01, kl_coef=0.1, kl_estimator="k1")
    loss, m = policy_loss(
        one(0.0), one(0.0), torch.tensor([1.0]), one(1.0), cfg, ref_logprobs=one(-0.5), entropy=one(2.0)
    )
    close(loss, -1.0 - 0.01 * 2.0 + 0.1 * 0.5)
    close(m["kl"], 0.5)
    close(m["entropy"], 2.0)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        policy_loss(one(0.0), one(0.0), torch.tensor([1.0]), one(1.0), cfg)
    # KL in the reward: no loss term, but still reported
    loss, m = policy_loss(
        one(0.0),
        one(0.0),
        torch.tensor([1.0]),
        one(1.0),
        LossConfig(kl_coef=0.1, kl_mode="reward", kl_estimator="k1"),
        ref_logprobs=one(-0.5),
    )
    close(loss, -1.0)
    close(m["kl"], 0.5)


def test_value_loss_clipped():
    v = torch.tensor([[1.0]])
    close(
        value_loss(v, torch.tensor([[0.0]]), torch.tensor([[2.0]]), torch.ones(1, 1), clip=0.2),
        0.5 * (2.0 - 0.2) ** 2,
    )
    close(value_loss(v, torch.tensor([[0.0]]), torch.tensor([[2.0]]), torch.ones(1, 1), clip=None), 0.5)


# ---- split invariance -------------------------------------------------------------------------------
def _random_batch(seed: int, b: int = 7, t: int = 6):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None] < lens[:, None]
    old = -torch.rand(b, t, generator=g) * 3
    lp = old + 0.4 * torch.randn(b, t, generator=g)
    ref = old + 0.2 * torch.randn(b, t, generator=g)
    ent = torch.rand(b, t, generator=g)
    adv = torch.randn(b, generator=g)
    return lp, old, ref, ent, adv, mask


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_loss_and_grad_invariant_to_micro_batches_and_dp_shards(agg, level):
    lp, old, ref, ent, adv, mask = _random_batch(0)
    cfg = LossConfig(loss_agg=agg, ratio=level, kl_coef=0.05, entropy_coef=0.01, dual_clip=3.0)
    full_lp = lp.clone().requires_grad_()
    full, _ = policy_loss(full_lp, old, adv, mask, cfg, ref_logprobs=ref, entropy=ent, max_response_len=6)
    full.backward()

    norm = compute_normalizer(agg, mask, max_response_len=6)
    # "rank 0" gets rows 0-3 as micro-batches [0,1],[2,3]; "rank 1" gets rows 4-6 as [4],[5,6].
    # Each micro-batch is trimmed to its own longest response, as the policy does.
    split_lp = lp.clone().requires_grad_()
    total = torch.zeros(())
    for rows in ([0, 1], [2, 3], [4], [5, 6]):
        width = int(mask[rows].sum(-1).max())
        part, _ = policy_loss(
            split_lp[rows, :width],
            old[rows, :width],
            adv[rows],
            mask[rows, :width],
            cfg,
            ref_logprobs=ref[rows, :width],
            entropy=ent[rows, :width],
            normalizer=norm,
        )
        part.backward()
        total = total + part.detach()
    close(total, full.detach(), 1e-6)
    close(split_lp.grad, full_lp.grad, 1e-6)


def test_naive_per_micro_batch_mean_is_not_invariant():
    """Guards the invariance test: normalising each piece by itself gives a different loss."""
    lp, old, _, _, adv, mask = _random_batch(1)
    cfg = LossConfig()
    full, _ = policy_loss(lp, old, adv, mask, cfg)
    naive = sum(policy_loss(lp[r], old[r], adv[r], mask[r], cfg)[0] for r in ([0, 1], [2, 3, 4, 5, 6])) / 2
    assert abs(float(naive) - float(full)) > 1e-4


# ---- whitening, PPO token rewards, GAE targets, shaping ----------------------------------------------
def test_whiten_hand_values_valid_entries_only():
    from reasoning_rl.algorithms import whiten
    from reasoning_rl.algorithms.whiten import EPS

    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    # valid: 1, 2, 3, 4, 5 -> mean 3, unbiased std sqrt(10 / 4)
    std = math.sqrt(2.5)
    close(
        whiten(x, mask), [[-2 / (std + EPS), -1 / (std + EPS), 0.0], [0.0, 1 / (std + EPS), 2 / (std + EPS)]]
    )
    close(whiten(torch.tensor([7.0, 9.0]), torch.tensor([True, False])), [0.0, 0.0])  # one entry: no spread


def test_one_whitening_serves_reinforce_pp_and_gae():
    """REINFORCE++ and PPO's GAE advantages normalise with the same function (one eps, one rule)."""
    from reasoning_rl.algorithms import gae_targets, whiten

    r = torch.tensor([1.0, 0.0, 1.0, 0.5])
    close(compute_advantages("reinforce_pp", r, torch.arange(4)), whiten(r, torch.ones(4, dtype=torch.bool)))
    rewards, values = torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[0.5, 0.2], [0.1, 0.3]])
    mask = torch.tensor([[1, 1], [1, 0]], dtype=torch.bool)
    adv, ret = gae_targets(rewards, values, mask, 1.0, 1.0)
    raw, raw_ret = compute_gae(rewards, values, mask, 1.0, 1.0)
    close(adv, whiten(raw, mask))
    close(ret, raw_ret)  # returns (the critic's targets) are never whitened
    close(raw, [[0.5, 0.8], [-0.1, 0.0]])  # by hand: 1 - 0.5, 1 - 0.2; 0 - 0.1


def test_token_rewards_last_token_and_kl():
    from reasoning_rl.algorithms import token_rewards

    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    out = token_rewards(torch.tensor([1.0, 0.5]), mask)
    assert out.tolist() == [[0.0, 0.0, 1.0], [0.5, 0.0, 0.0]]
    lp = torch.tensor([[-1.0, -2.0, -1.0], [-1.0, -9.0, -9.0]])
    ref = torch.tensor([[-1.5, -2.0, -1.0], [-2.0, 0.0, 0.0]])
    out = token_rewards(torch.tensor([1.0, 0.5]), mask, 0.1, lp, ref, "k1")
    # k1 = logp - ref_logp on every real token, nothing on padding
    close(out, [[-0.05, 0.0, 1.0], [0.4, 0.0, 0.0]])


def test_explained_variance_hand_values():
    from reasoning_rl.algorithms import explained_variance

    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]])
    assert explained_variance(x, x, mask) == pytest.approx(1.0)
    assert explained_variance(torch.zeros_like(x), x, mask) == pytest.approx(0.0, abs=1e-6)
    # a constant offset is explained (Var(returns - values) = 0):
    assert explained_variance(x - 1.0, x, mask) == pytest.approx(1.0)
    assert math.isnan(explained_variance(x, torch.ones_like(x), mask))  # constant returns: undefined


def test_overlong_penalty_hand_values():
    from reasoning_rl.algorithms.shaping import overlong_penalty

    # budget 10, buffer 4: free up to 6 tokens, then 0.25 per token up to the full penalty at 10
    close(overlong_penalty(torch.tensor([3, 6, 7, 9, 10]), 10, 4, 2.0), [0.0, 0.0, 0.5, 1.5, 2.0])
