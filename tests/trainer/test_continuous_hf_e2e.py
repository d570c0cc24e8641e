"""Continuous rollouts on the hf engine (issue 43): its runs take the frontier at any ``rollout.max_lag``.

- The SIGKILL-at-five-points run of ``test_continuous_e2e`` on the hf engine at ``max_lag = 1``: a checkpoint
  survives every kill and the resumed run trains every drawn prompt once, none lost, the checkpoint's queued
  samples resubmitted; over its 8 steps every trained token carries the policy version that sampled it, none
  lags the trainer by more than 1, groups wait in the engine across updates, and the loss runs as decoupled PPO.
  (The hf engine generates a group whole and oldest first, so no sample spans two versions.) These were a 3-step
  run's of their own, which this run's processes prove as well: one process fewer.

(``max_lag = 0`` through the frontier is the golden trajectories' path: ``test_golden``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import bounded_lag, kill_at_every_point, lossless
from test_train_e2e import config, kill_at, metrics, train

pytestmark = [pytest.mark.slow]

MAX_LAG, BATCH, N = 1, 2, 4
ROLLOUT = {"engine": "hf", "n": N, "max_tokens": 8, "max_lag": MAX_LAG}


def test_hf_continuous_run_survives_kills_lossless(tmp_path: Path, tiny_model_dir: Path) -> None:
    steps = 8
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "hfk",
        trainer={"steps": steps, "batch_size": BATCH, "checkpoint_every": 1, "keep_checkpoints": 2},
        rollout=ROLLOUT,
    )
    run = tmp_path / "hfk"
    resumed = kill_at_every_point(run, steps, lambda _, fault: kill_at(cfg, fault, "trainer.resume=auto"))
    out = train(cfg, "trainer.resume=auto", timeout=600)
    assert f"(step {resumed})" in out.stdout
    assert "continuous rollouts on the engine in this process: max_lag=1" in out.stdout
    assert "kept resident" in out.stdout
    assert bounded_lag(run, steps, BATCH * N, MAX_LAG) == 0  # whole responses: none spans two versions
    lossless(run, steps, BATCH)
    rows = [r for r in metrics(run) if "reward/mean" in r]  # every process's steps (resumed ones re-logged)
    assert {r["step"] for r in rows} == set(range(1, steps + 1))
    assert all(r["staleness/lag_max"] <= MAX_LAG for r in rows)
    assert all(r["rollout/in_flight"] > 0 for r in rows)  # admitted groups wait in the engine across updates
    assert "decoupled/ess" in rows[-1]


def test_hf_dynamic_sampling_takes_the_frontier_and_resumes(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Dynamic sampling at ``max_lag = 1`` runs on the frontier (reject-and-admit, trainer/rejection.py): every
    step reports its rejected and replacement groups within the bound, and a resumed run continues it."""
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "hfds",
        trainer={"steps": 2, "batch_size": BATCH, "checkpoint_every": 1},
        rollout=ROLLOUT,
        algorithm={"dynamic_sampling": True, "max_refill_rounds": 1},
    )
    out = train(cfg)
    assert "continuous rollouts on the engine in this process: max_lag=1" in out.stdout
    train(cfg, "trainer.steps=3", "trainer.resume=auto")
    rows = [r for r in metrics(tmp_path / "hfds") if "reward/mean" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["rollout/replacement_groups"] <= BATCH and r["staleness/lag_max"] <= MAX_LAG for r in rows)
    assert all(r["rollout/rejected_groups"] >= r["rollout/replacement_groups"] for r in rows)
