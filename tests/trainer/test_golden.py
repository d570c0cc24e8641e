"""The golden trajectories (tests/assets/golden_*.json, see tests/trainer/golden.py) still match, on the HF
engine (every variant) and on vLLM's CPU backend (GRPO ``recompute``, PPO ``gae``); and the vLLM GRPO run at
``rollout.max_lag = 1`` keeps every trained token at most one version behind the trainer (issue 43: one
rollout loop, whatever the engine and the lag).

Tolerance: float32 on CPU with one thread is bitwise reproducible on one machine; across machines the
BLAS kernels (AVX2 vs AVX-512) may sum in another order, ~1e-7 relative per op, which four Adam steps
amplify to ~1e-5 at most. ``rtol=1e-3`` leaves room for that and for eps-level changes (whitening's eps
is 1e-6 of a std ~1), yet any real change of the algorithm (a sign, a mask, a clip range, a missing KL
term, a different estimator or old-log-prob source) moves loss or grad norm by far more than 0.1 %.
Rewards are a discrete function of the sampled tokens: they must match exactly, or the rollouts changed
(vLLM's are reproducible because every sample is seeded: ``rollout.seed_per_sample``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import bounded_lag

from tests.trainer.golden import BASE, PINNED, THREADS, assert_golden, run_variant, variant_config
from tests.trainer.test_train_e2e import metrics, train

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden runs' threads (reproducible float32 sums)."""
    for key, value in THREADS.items():
        monkeypatch.setenv(key, value)


def _pinned(engine: str) -> list[tuple[str, str]]:
    return [(algo, variant) for algo, variants in PINNED[engine].items() for variant in variants]


@pytest.mark.parametrize(("algo", "variant"), _pinned("hf"))
def test_golden_trajectory(algo: str, variant: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    assert_golden(run_variant(tmp_path, tiny_model_dir, algo, variant), algo, variant)


@pytest.mark.vllm
@pytest.mark.parametrize(("algo", "variant"), _pinned("vllm"))
def test_vllm_golden_trajectory_at_max_lag_0(
    algo: str, variant: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    got = run_variant(tmp_path, tiny_model_dir, algo, variant, "vllm")
    assert_golden(got, algo, variant, "vllm")


@pytest.mark.vllm
def test_vllm_golden_grpo_at_max_lag_1_bounds_the_lag(tmp_path: Path, tiny_model_dir: Path) -> None:
    steps = 3
    cfg = variant_config(
        tmp_path,
        tiny_model_dir,
        "grpo",
        "recompute",
        "vllm",
        rollout={"max_lag": 1, "running_groups": 2 * BASE["trainer"]["batch_size"]},  # all the lag allows
        trainer={"steps": steps},
        logging={"samples": True},  # bounded_lag reads every trained token's version from samples/
    )
    train(cfg, timeout=600)
    run = tmp_path / "grpo-recompute"
    samples = BASE["trainer"]["batch_size"] * BASE["rollout"]["n"]
    bounded_lag(run, steps, samples, 1)
    rows = [r for r in metrics(run) if "reward/mean" in r]
    assert len(rows) == steps and all(r["staleness/lag_max"] <= 1 for r in rows)
    # the lag was taken, not only allowed: running_groups = batch x (1 + max_lag) groups admitted at version 0,
    # so the second step trains the half that waited across the first update (finished: the tiny model's 6 tokens)
    assert max(r["staleness/lag_max"] for r in rows) == 1
    assert any(r["rollout/in_flight"] > 0 for r in rows)
    assert all("decoupled/ess" in r for r in rows)  # the loss ran as decoupled PPO
