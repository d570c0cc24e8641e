"""`rrl train` under the default ``trainer.checkpoint_every: 0`` keeps its finished steps on Ctrl-C (issue 47).

The Ctrl-C comes at a named point (``RRL_FAULT=<phase>:<n>:int``), never by timing: inside step 1's update it is
held to the step's end and step 1 is saved; mid-generation of a later step the last finished step is saved. The
run resumed from that checkpoint ends where an uninterrupted one does, weights and data order alike.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.trainer.test_train_e2e import REPO, config, env, metrics, sampled_ids, train, train_cmd, weights

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

TIMED_OFF = {"trainer": {"steps": 3, "batch_size": 4, "checkpoint_every": 0, "checkpoint_minutes": 0}}


def _interrupted(cfg: Path, fault: str) -> tuple[int, str]:
    """Run ``rrl train cfg`` with a Ctrl-C at ``fault``; (the step it reports as finished, its output)."""
    proc = subprocess.run(
        train_cmd(cfg),
        cwd=REPO,
        env={**env(), "RRL_FAULT": fault},
        capture_output=True,
        text=True,
        timeout=300,
        # SIGINT at its default in the child (a background runner's children may inherit it ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    found = re.search(r"^interrupted after step (\d+) of 3", out, re.M)
    assert found is not None, out[-3000:]
    return int(found.group(1)), out


def test_ctrl_c_in_an_update_finishes_the_step_and_saves_it(tmp_path: Path, tiny_model_dir: Path) -> None:
    # heartbeat_s=0: a heartbeat line at every report (issue 47: a long step said nothing until it ended)
    logging = {"console": "plain", "tensorboard": False, "heartbeat_s": 0}
    cfg = config(tmp_path, tiny_model_dir, "upd", logging=logging, **TIMED_OFF)
    step, out = _interrupted(cfg, "update:1:int")  # after step 1's first optimizer step
    assert step == 1
    assert "heartbeat: step 1: generate (generated 32/32, graded 32/32)" in out
    assert re.search(r"heartbeat: step 1: update \(micro-batch 1/\d+\)", out), out[-3000:]
    # gen tok/s counts the tokens generated inside the step's own generation time (issue 47: continuous steps
    # counted the trained groups' tokens, many generated in earlier steps: 141,859 tok/s)
    (row,) = [r for r in metrics(tmp_path / "upd") if "reward/mean" in r]
    assert 0 < row["rollout/generated_tokens"] <= 32 * 6
    assert row["throughput/gen_tokens_per_s"] == pytest.approx(
        row["rollout/generated_tokens"] / row["time/generate_s"]
    )
    assert (tmp_path / "upd" / "checkpoints" / "step_1" / "COMPLETE").exists()
    assert "latest checkpoint:" in out and "step_1 (step 1)" in out and "trainer.resume=auto" in out


def test_ctrl_c_mid_generation_saves_the_last_finished_step_and_resumes_losslessly(
    tmp_path: Path, tiny_model_dir: Path, uninterrupted: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    """The reference is the ``uninterrupted`` fixture's run (same config but 6 steps, checkpointed every step: the
    first 3 steps of a run with a constant learning rate are a 3-step run's), shared with test_train_e2e."""
    import torch

    full, _ = uninterrupted
    cut = config(tmp_path, tiny_model_dir, "cut", **TIMED_OFF)
    # engine steps of the continuous rollouts: a max_tokens=6 step takes about 7, so #12 is inside step 2
    step, out = _interrupted(cut, "generate:12:int")
    assert step >= 1, out[-3000:]
    assert (tmp_path / "cut" / "checkpoints" / f"step_{step}" / "COMPLETE").exists()
    assert f"interrupt: saving step {step}, the last finished step" in out
    resumed = train(cut, "trainer.resume=auto")
    assert f"resumed from {tmp_path / 'cut' / 'checkpoints' / f'step_{step}'}" in resumed.stdout
    for later in range(step + 1, 4):
        assert sampled_ids(tmp_path / "cut", later) == sampled_ids(full, later)
    a = weights(full / "checkpoints" / "step_3")
    b = weights(tmp_path / "cut" / "checkpoints" / "step_3")
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
