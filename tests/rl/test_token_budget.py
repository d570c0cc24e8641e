"""Variable-length responses up to 16k under the memory plan's token budget (issue 45): a long-tailed batch is
split so that no micro-batch computes more positions than the budget, the split changes neither the loss nor
the gradients, the plan of a 16k run prices its update at that budget, and the weight hand-off goes out in the
engine's bf16, one bucket at a time."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.memory_plan.plan import plan_run  # noqa: E402
from reasoning_rl.memory_plan.update import TrainSetup, activation_bytes, update_peak  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.batch import AttentionCost, block_slots, plan_layout  # noqa: E402
from tests.rl.test_memory_plan import H200, QWEN15, tiny_config  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "gpu"))
from lengths import describe, lognormal_lengths  # noqa: E402

PROMPT = 512
CAP = 16_384
TOL = 1e-5


def plan_16k(tmp_path: Path, **model: Any) -> Any:
    """The memory plan of the Qwen2.5-1.5B shape, 64 prompts x 8 up to 16,384 tokens, on one H200."""
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": CAP, "n": 8}, trainer={"batch_size": 64}, model=model
    )
    p = plan_run(
        cfg,
        shape,
        device="cuda",
        dtype="bfloat16",
        capacity=H200,
        world=1,
        max_model_len=PROMPT + CAP,
        engine=True,
    )
    return p, cfg, shape


def long_tailed(count: int, cap: int, prompt: int, seed: int = 0) -> TokenBatch:
    lens = lognormal_lengths(count, cap, seed=seed, floor=1)
    return TokenBatch([torch.zeros(prompt + n, dtype=torch.long) for n in lens], [prompt] * count)


def test_the_length_distribution_is_the_learning_workloads_scaled() -> None:
    d = describe(lognormal_lengths(512, CAP), CAP)
    assert d["p50"] == pytest.approx(0.39 * CAP, rel=0.02)
    assert 0.13 <= d["at_cap"] <= 0.16 and d["p10"] < d["p50"] // 3
    assert sorted(lognormal_lengths(512, CAP, seed=1)) == sorted(lognormal_lengths(512, CAP, seed=2))


@pytest.mark.parametrize("packing", ["off", "on", "auto"])
def test_a_long_tailed_16k_batch_never_exceeds_the_plans_budget(tmp_path: Path, packing: str) -> None:
    """512 responses of the log-normal up to 16,384 tokens (+ 512 prompt) under the budget the plan picks for
    the 1.5B shape on an H200: each micro-batch's positions (padding included) within it, every row once."""
    plan, _, _ = plan_16k(tmp_path, gradient_checkpointing=True)
    assert plan.fits, plan.problem
    budget = plan.micro_batch_tokens
    batch = long_tailed(512, CAP, PROMPT)
    lengths = [int(s.numel()) for s in batch.sequences]
    assert max(lengths) == PROMPT + CAP <= budget
    layout = plan_layout(batch, budget, packing=packing, cost=AttentionCost(pair=6.6e-5))  # sdpa's 1.5B cost
    assert sorted(i for block in layout.blocks for i in block) == list(range(512))
    assert layout.largest == max(block_slots(lengths, b, layout.packed) for b in layout.blocks) <= budget
    assert len(layout.blocks) > 1 and layout.tokens == batch.num_tokens


def test_the_plan_of_a_16k_run_prices_its_update_at_the_budget(tmp_path: Path) -> None:
    """No micro_batch_tokens set: the plan picks the largest budget that fits (at least one 16,896-token
    sequence), its update peak is the one at that budget (activations for budget tokens), and the step's peak
    is at least that; a budget one step larger would not fit."""
    plan, cfg, shape = plan_16k(tmp_path, gradient_checkpointing=True)
    s = TrainSetup.of(cfg, device="cuda", dtype="bfloat16", world=1)
    assert cfg.algorithm.micro_batch_tokens is None
    assert plan.micro_batch_tokens == plan.largest >= PROMPT + CAP
    engine = plan.update.get("engine", 0)
    assert plan.update["activations"] == activation_bytes(shape, s, plan.micro_batch_tokens)
    assert plan.update_peak == update_peak(shape, s, plan.micro_batch_tokens) + engine
    assert plan.peak >= plan.update_peak and plan.peak <= plan.usable
    assert update_peak(shape, s, plan.micro_batch_tokens + 256) + engine > plan.usable


def test_without_checkpointing_16k_is_refused_or_fits_one_sequence(tmp_path: Path) -> None:
    """Without checkpointing the 16k run either fits a budget of at least one sequence or is refused in one
    line naming the switch: never a budget below one sequence."""
    plan, _, _ = plan_16k(tmp_path)
    assert plan.micro_batch_tokens >= PROMPT + CAP
    if not plan.fits:
        assert "\n" not in str(plan.problem)


@pytest.mark.parametrize("packing", ["off", "on"])
def test_split_micro_batches_give_the_unsplit_loss_and_gradients(tiny_model_dir: Path, packing: str) -> None:
    """The same long-tailed batch (log-normal up to 64 tokens) in one micro-batch and under a budget of 96
    positions (many micro-batches): equal loss, metrics and gradients (an SGD step, float32, 1e-5)."""
    batch = long_tailed(24, 64, 4, seed=3)
    g = torch.Generator().manual_seed(0)
    for i, seq in enumerate(batch.sequences):
        seq.copy_(torch.randint(7, 90, seq.shape, generator=g))
        batch.sequences[i] = seq
    adv = compute_advantages("grpo", torch.rand(24, generator=g), torch.arange(24) // 8)
    cfg = LossConfig(clip_high=0.28, entropy_coef=0.01)
    out = {}
    for budget in (100_000, 96):
        policy = Policy.from_pretrained(
            str(tiny_model_dir), lr=1e-3, micro_batch_tokens=budget, packing=packing
        )
        policy.optimizer = torch.optim.SGD(policy.module.parameters(), lr=1e-2)
        old = policy.logprobs(batch)[0] - 0.4 * batch.response_mask
        m = policy.train_step(batch, adv, old, None, cfg)
        out[budget] = (m, dict(policy.lm.named_parameters()))
    (whole, p_whole), (split, p_split) = out[100_000], out[96]
    assert whole["micro_batches"] == 1 and split["micro_batches"] > 4
    assert split["micro_batch_slots_max"] <= 96 < whole["micro_batch_slots_max"]
    for key in ("loss", "pg_loss", "entropy", "clip_frac", "ratio_mean", "grad_norm"):
        assert whole[key] == pytest.approx(split[key], rel=TOL, abs=1e-7), key
    assert whole["clip_frac"] > 0
    for name, p in p_whole.items():
        assert torch.allclose(p, p_split[name], atol=TOL, rtol=0), name


def test_the_hand_off_is_bf16_one_bucket_at_a_time(tiny_model_dir: Path) -> None:
    """fp32 masters go out as bf16 in buckets of at most bucket_bytes (a larger tensor alone in its own):
    every floating tensor, all of them once, in the engine's dtype."""
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-4, micro_batch_tokens=256)
    largest = max(p.numel() * 2 for p in policy.lm.parameters())
    bucket = largest * 3 // 4  # the largest tensor alone exceeds it
    buckets = list(policy.iter_full_params(bucket, torch.bfloat16))
    names = [n for b in buckets for n, _ in b]
    assert sorted(names) == sorted(n for n, _ in policy.lm.named_parameters()) and len(buckets) > 2
    for b in buckets:
        size = sum(t.numel() * t.element_size() for _, t in b)
        assert size <= bucket or len(b) == 1
        assert all(t.dtype == torch.bfloat16 for _, t in b)
    assert any(len(b) == 1 and b[0][1].numel() * 2 == largest for b in buckets)
