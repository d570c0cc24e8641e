"""The golden trajectories (tests/assets/golden_*.json, see tests/trainer/golden.py) still match.

Tolerance: float32 on CPU with one thread is bitwise reproducible on one machine; across machines the
BLAS kernels (AVX2 vs AVX-512) may sum in another order, ~1e-7 relative per op, which four Adam steps
amplify to ~1e-5 at most. ``rtol=1e-3`` leaves room for that and for eps-level changes (whitening's eps
is 1e-6 of a std ~1), yet any real change of the algorithm (a sign, a mask, a clip range, a missing KL
term, a different estimator or old-log-prob source) moves loss or grad norm by far more than 0.1 %.
Rewards are a discrete function of the sampled tokens: they must match exactly, or the rollouts changed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.trainer.golden import RUNS, THREADS, golden_path, run_variant

pytestmark = [pytest.mark.slow]

RTOL, ATOL = 1e-3, 1e-5


@pytest.mark.parametrize(("algo", "variant"), [(a, v) for a, vs in RUNS.items() for v in vs])
def test_golden_trajectory(
    algo: str, variant: str, tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    golden = json.loads(golden_path(algo).read_text())["variants"][variant]
    assert golden["overrides"] == RUNS[algo][variant], (
        "the run changed: regenerate (see tests/trainer/golden.py)"
    )
    for key, value in THREADS.items():
        monkeypatch.setenv(key, value)
    got = run_variant(tmp_path, tiny_model_dir, algo, variant)
    want = golden["steps"]
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want, strict=True), start=1):
        assert g.keys() == w.keys(), f"step {step}: metrics {sorted(g)} != golden {sorted(w)}"
        assert g["reward/mean"] == w["reward/mean"], f"step {step}: rollouts changed ({g} vs {w})"
        bad = {k: (g[k], w[k]) for k in w if not math.isclose(g[k], w[k], rel_tol=RTOL, abs_tol=ATOL)}
        assert not bad, f"{algo}/{variant} step {step}: (got, golden) {bad}"
