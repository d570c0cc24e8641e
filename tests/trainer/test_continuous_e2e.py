"""Continuous rollouts end to end (issue 31): one `rrl train` run with rollout.max_lag=2 on vLLM, SIGKILLed at
five named points (``reasoning_rl.faults``: mid-checkpoint, mid-generation, mid-update, mid-hand-off, and
mid-hand-off of a resume's own weight load) and resumed each time, then run to the end. It proves, on the
trained samples:

- every token's policy version is recorded and no token lags the trainer by more than max_lag;
- unfinished requests crossed updates (some sample spans two versions) and stayed resident (the path taken);
- no prompt was lost or trained twice across the kills: the trained groups plus the final checkpoint's
  in-flight ones are exactly the prompts drawn (one epoch, counted by uid); partial samples of a checkpoint
  were resubmitted from their tokens (the path an engine that sleeps for the update takes too);
- the loss ran as decoupled PPO (its ESS and the trainer/engine mismatch are in the metrics line).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import bounded_lag, kill_at_every_point, lossless
from test_train_e2e import config, kill_at, train

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

MAX_LAG, BATCH, N, STEPS = 2, 2, 4, 8


def test_continuous_run_bounded_lag_lossless_resume(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "cont",
        trainer={"steps": STEPS, "batch_size": BATCH, "checkpoint_every": 1, "keep_checkpoints": 2},
        # 6 running sequences of the 8 in the engine (rollout.running_groups = B groups, refilled as groups
        # finish, up to 24 samples untrained): later groups start while older ones still decode, so some
        # requests are mid-sample at an update (the tiny model ends all of a group's samples at the same
        # lengths whatever the prompt)
        rollout={"n": N, "max_tokens": 24, "max_lag": MAX_LAG, "engine_args": {"max_num_seqs": 6}},
    )
    run = tmp_path / "cont"
    resumed = kill_at_every_point(run, STEPS, lambda _, fault: kill_at(cfg, fault, "trainer.resume=auto"))
    out = train(cfg, "trainer.resume=auto", timeout=600)
    assert "kept resident" in out.stdout and f"(step {resumed})" in out.stdout

    assert bounded_lag(run, STEPS, BATCH * N, MAX_LAG) > 0, "no sample continued across an update"
    rows = lossless(run, STEPS, BATCH)
    last = rows[-1]
    assert last["staleness/lag_max"] <= MAX_LAG
    assert 0.0 < last["decoupled/ess"] <= 1.0 and "mismatch/kl" in last
