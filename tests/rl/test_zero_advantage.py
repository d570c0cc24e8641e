"""Rows with an exactly zero advantage are skipped in the update (issue 30 item 9): no forward/backward, the
same weights after the step as with them, and no skipping when an entropy or KL loss term reads every row."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.policy.zero_advantage import trained_rows  # noqa: E402


def batch_of(n: int = 8, seed: int = 0) -> TokenBatch:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(7, 90, (6 + (3 * i) % 7,), generator=g) for i in range(n)]
    return TokenBatch(seqs, [3] * n)


def params(policy: Policy) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in policy.module.named_parameters()}


def test_skipped_rows_leave_the_step_unchanged(tiny_model_dir) -> None:
    batch = batch_of()
    warm = torch.linspace(-1, 1, 8)  # a first step everywhere: AdamW moments that a zero-grad step still uses
    partial = torch.tensor([0.5, -0.5, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0])  # two of four groups all-equal
    steps = [warm, partial, torch.zeros(8)]
    runs = []
    for skip in (False, True):
        policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, weight_decay=0.1, micro_batch_tokens=40)
        for name, p in policy.module.named_parameters():
            # a key bias has an exactly zero gradient (softmax ignores a shift shared by a query's scores);
            # AdamW would turn its rounding noise into lr-sized steps that no summation order reproduces
            if name.endswith("k_proj.bias"):
                p.requires_grad_(False)
        metrics = [
            policy.train_step(batch, adv, None, None, LossConfig(skip_zero_advantage=skip)) for adv in steps
        ]
        runs.append((params(policy), metrics))
    (full, m_full), (skipped, m_skip) = runs
    for name, value in full.items():
        torch.testing.assert_close(skipped[name], value, rtol=1e-5, atol=1e-6, msg=name)
    assert [m["skipped_rows"] for m in m_skip] == [0.0, 4.0, 8.0]
    assert m_skip[2]["micro_batches"] == 0 < m_full[2]["micro_batches"]  # nothing was run forward
    assert m_skip[1]["micro_batches"] <= m_full[1]["micro_batches"]
    for a, b in zip(m_full, m_skip, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"])
    assert m_skip[1]["ratio_mean"] == pytest.approx(1.0)  # over the trained rows, not diluted by skipped ones
    # issue 47: with no row computed, entropy (and the other token averages) are left out, never a fake 0.000
    # that reads as entropy collapse; where rows were computed it is their entropy
    assert not {"entropy", "ratio_mean", "clip_frac"} & set(m_skip[2])
    assert m_skip[1]["entropy"] > 0 and m_full[2]["entropy"] > 0


def test_no_skipping_when_another_loss_term_reads_every_row() -> None:
    adv, mask = torch.tensor([0.0, 1.0]), torch.ones(2, 3, dtype=torch.bool)
    assert trained_rows(adv, mask, LossConfig()).tolist() == [False, True]
    assert trained_rows(adv, mask, LossConfig(entropy_coef=0.01)) is None
    assert trained_rows(adv, mask, LossConfig(kl_coef=0.1, kl_mode="loss")) is None
    assert trained_rows(adv, mask, LossConfig(kl_coef=0.1, kl_mode="reward")) is not None  # KL in the reward
    per_token = torch.tensor([[0.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    padded = torch.tensor([[True, True, False], [True, True, True]])
    assert trained_rows(per_token, padded, LossConfig()).tolist() == [False, False]  # 2.0 sits on padding


def test_computed_tokens_count_only_the_rows_run(tiny_model_dir) -> None:
    """``computed_tokens`` (what MFU counts) leaves out skipped rows; ``tokens`` is the whole batch."""
    batch = batch_of()
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3, micro_batch_tokens=40)
    adv = torch.tensor([0.5, -0.5, 0.0, 0.0, 1.0, -1.0, 0.0, 0.0])
    kept = [0, 1, 4, 5]
    m = policy.train_step(batch, adv, None, None, LossConfig())
    real = sum(int(batch.sequences[i].numel()) for i in kept)
    assert m["skipped_rows"] == 4.0 and m["computed_tokens"] == real < m["tokens"] == batch.num_tokens
    full = policy.train_step(batch, adv, None, None, LossConfig(skip_zero_advantage=False))
    assert full["skipped_rows"] == 0.0 and full["computed_tokens"] == batch.num_tokens
