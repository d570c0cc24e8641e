"""Two colocated Ray ranks take the one loop (issue 43): the ``Frontier`` drives both ranks' engines as one
``RemoteEngine`` (each prompt group on rank ``group % 2``, deltas merged), at any ``rollout.max_lag``.

- ``max_lag = 0`` reproduces the recorded golden GRPO and PPO trajectories (``tests/assets/golden_*.json``, the
  one-rank runs): rewards exactly (the same tokens whichever rank sampled them), losses within the golden
  tolerance (two ranks only reorder float32 sums, ~1e-5; ``tests/distributed/runs.py``);
- ``max_lag = 1`` runs 3 steps with every trained token at most one version behind the trainer, groups waiting
  in the ranks' engines across updates.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rrl_testutil import bounded_lag

from tests.trainer.golden import THREADS, assert_golden, run_variant
from tests.trainer.test_train_e2e import config, metrics, train

pytestmark = [pytest.mark.slow, pytest.mark.distributed]

TWO = {"ranks_per_node": 2}  # colocated (the default placement): each training rank holds an engine


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden runs' threads (reproducible float32 sums), for the driver and the Ray ranks alike."""
    pytest.importorskip("ray")
    for key, value in THREADS.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize(("algo", "variant"), [("grpo", "recompute"), ("ppo", "gae")])
def test_two_colocated_ranks_at_max_lag_0_reproduce_the_golden_run(
    algo: str, variant: str, tmp_path: Path, tiny_model_dir: Path
) -> None:
    assert_golden(run_variant(tmp_path, tiny_model_dir, algo, variant, resources=TWO), algo, variant)
    trace = [
        json.loads(line) for line in (tmp_path / f"{algo}-{variant}" / "trace.jsonl").read_text().splitlines()
    ]
    assert trace[0]["world_size"] == 2
    advanced = {
        r["attrs"]["rank"]
        for r in trace
        if r.get("type") == "counter"
        and r["name"] == "worker_seconds"
        and r["attrs"]["method"] == "live_advance"
    }
    assert advanced == {0, 1}  # both ranks' engines stepped through the frontier


def test_two_colocated_ranks_at_max_lag_1_bound_the_lag(tmp_path: Path, tiny_model_dir: Path) -> None:
    batch, n, steps = 2, 4, 3
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "lag1",
        trainer={"steps": steps, "batch_size": batch},
        rollout={"engine": "hf", "n": n, "max_tokens": 8, "max_lag": 1},
        resources=TWO,
    )
    out = train(cfg, timeout=900)
    assert "continuous rollouts on each colocated rank's engine: max_lag=1" in out.stdout
    run = tmp_path / "lag1"
    assert bounded_lag(run, steps, batch * n, 1) == 0  # the hf engine returns whole responses
    rows = [r for r in metrics(run) if "reward/mean" in r]
    assert len(rows) == steps and all(r["staleness/lag_max"] <= 1 for r in rows)
    assert all(
        r["rollout/in_flight"] > 0 for r in rows
    )  # admitted groups waited in the engines across updates
    assert "decoupled/ess" in rows[-1]
