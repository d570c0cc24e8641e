"""The golden trajectories (tests/assets/golden_*.json, see tests/trainer/golden.py) still match.

Tolerance: float32 on CPU with one thread is bitwise reproducible on one machine; across machines the
BLAS kernels (AVX2 vs AVX-512) may sum in another order, ~1e-7 relative per op, which four Adam steps
amplify to ~1e-5 at most. ``rtol=1e-3`` leaves room for that and for eps-level changes (whitening's eps
is 1e-6 of a std ~1), yet any real change of the algorithm (a sign, a mask, a clip range, a missing KL
term, a different estimator or old-log-prob source) moves loss or grad norm by far more than 0.1 %.
Rewards are a discrete function of the sampled tokens: they must match exactly, or the rollouts changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.golden import RUNS, THREADS, assert_golden, run_variant

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize(("algo", "variant"), [(a, v) for a, vs in RUNS.items() for v in vs])
def test_golden_trajectory(
    algo: str, variant: str, tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in THREADS.items():
        monkeypatch.setenv(key, value)
    assert_golden(run_variant(tmp_path, tiny_model_dir, algo, variant), algo, variant)
