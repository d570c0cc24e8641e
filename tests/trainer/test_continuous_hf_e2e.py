"""Continuous rollouts on the hf engine (issue 43): its runs take the frontier at any ``rollout.max_lag``.

- ``max_lag = 1`` runs 3 steps: every trained token carries the policy version that sampled it, none lags the
  trainer by more than 1, groups wait in the engine across updates, and the loss runs as decoupled PPO. (The hf
  engine generates a group whole and oldest first, so no sample spans two versions.)
- The SIGKILL-at-five-points run of ``test_continuous_e2e`` on the hf engine: a checkpoint survives every kill
  and the resumed run trains every drawn prompt once, none lost, the checkpoint's queued samples resubmitted.

(``max_lag = 0`` through the frontier is the golden trajectories' path: ``test_golden``.)
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from test_continuous_e2e import KILLS, _kill_at, _latest, _rows
from test_train_e2e import config, metrics, train

pytestmark = [pytest.mark.slow]

MAX_LAG, BATCH, N = 1, 2, 4


def _lags(run: Path, steps: int) -> set[int]:
    """Each trained token's lag (trainer version - sampling version) over steps 1..steps, checking each
    sample's versions only grow."""
    lags: set[int] = set()
    for step in range(1, steps + 1):
        rows = _rows(run, step)
        assert len(rows) == BATCH * N
        for r in rows:
            versions = r["versions"]
            assert versions and versions == sorted(versions)
            lags.update((step - 1) - v for v in versions)
    return lags


def test_hf_max_lag_1_three_steps(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "hf1",
        trainer={"steps": 3, "batch_size": BATCH},
        rollout={"engine": "hf", "n": N, "max_tokens": 8, "max_lag": MAX_LAG},
    )
    out = train(cfg)
    assert "continuous rollouts on the engine in this process: max_lag=1" in out.stdout
    assert "kept resident" in out.stdout
    lags = _lags(tmp_path / "hf1", 3)
    assert lags and all(0 <= lag <= MAX_LAG for lag in lags), lags
    rows = [r for r in metrics(tmp_path / "hf1") if "reward/mean" in r]
    assert len(rows) == 3 and all(r["staleness/lag_max"] <= MAX_LAG for r in rows)
    assert all(r["rollout/in_flight"] > 0 for r in rows)  # admitted groups wait in the engine across updates
    assert "decoupled/ess" in rows[-1]


def test_hf_continuous_run_survives_kills_lossless(tmp_path: Path, tiny_model_dir: Path) -> None:
    steps = 8
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "hfk",
        trainer={"steps": steps, "batch_size": BATCH, "checkpoint_every": 1, "keep_checkpoints": 2},
        rollout={"engine": "hf", "n": N, "max_tokens": 8, "max_lag": MAX_LAG},
    )
    run = tmp_path / "hfk"
    latest: list[int | None] = []
    for i, fault in enumerate(KILLS):
        log = tmp_path / f"kill{i}.err"
        assert _kill_at(cfg, run, fault, log) == -signal.SIGKILL, log.read_text()[-2000:]
        phase, nth = fault.split(":")
        assert f"RRL_FAULT: SIGKILL at {phase} #{nth}" in log.read_text()
        latest.append(_latest(run))
    assert latest[0] is not None and latest == sorted(latest), latest
    resumed = _latest(run)
    assert resumed is not None and resumed < steps
    out = train(cfg, "trainer.resume=auto", timeout=600)
    assert f"(step {resumed})" in out.stdout

    assert all(0 <= lag <= MAX_LAG for lag in _lags(run, steps))
    trained = [
        uid
        for step in range(1, steps + 1)
        for uid in sorted({r["id"].split("#")[0] for r in _rows(run, step)})
    ]
    frontier = json.loads((run / "checkpoints" / f"step_{steps}" / "trainer_state.json").read_text())[
        "frontier"
    ]
    in_flight = [g["uid"] for g in frontier["groups"]]
    drawn = frontier["schedule"]["next_ticket"]
    assert drawn <= 32  # one epoch of the 32 prompts
    assert len(trained) == len(set(trained)) == steps * BATCH  # none trained twice
    assert not set(trained) & set(in_flight)
    assert len(trained) + len(in_flight) == drawn  # none lost
    assert any(r["rollout/resubmitted"] > 0 for r in metrics(run) if "reward/mean" in r)
