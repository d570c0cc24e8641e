"""`rrl train` as a subprocess (issue 30): a run whose every sample is a grader error stops at step 1 with one
line and exit 2; Ctrl-C prints after which step it stopped and how to continue (or that it cannot)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.trainer.test_train_e2e import REPO, config, env, train_cmd

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_all_error_run_stops_with_one_line(tmp_path: Path, tiny_model_dir: Path) -> None:
    cfg = config(
        tmp_path,
        tiny_model_dir,
        "errs",
        data={"default_grader": "task_graders:AlwaysErrors"},
        grading={"selftest": False},
    )
    proc = subprocess.run(train_cmd(cfg), cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    (line,) = [
        x for x in proc.stderr.splitlines() if x.startswith("error:")
    ]  # one line (the rest: engine logs)
    assert "step 1: every one of 32 samples is a grader error" in line
    assert "'task_graders:AlwaysErrors'" in line and "other" in line and "step 2" not in proc.stdout


def test_ctrl_c_says_where_the_run_stopped_and_how_to_continue(tmp_path: Path, tiny_model_dir: Path) -> None:
    # more steps than the test can ever see finish: a fast machine must not end the run before the signal
    cfg = config(tmp_path, tiny_model_dir, "intr", trainer={"steps": 100_000, "checkpoint_every": 1})
    # SIGINT at its default in the child (a background runner's children may inherit it ignored)
    proc = subprocess.Popen(
        train_cmd(cfg, "rollout.n=4"),
        cwd=REPO,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    checkpoints = tmp_path / "intr" / "checkpoints"
    deadline = time.monotonic() + 600  # a hang guard only (engine start + 2 steps on a loaded 2-core box)
    # any completed checkpoint from step 2 on (older ones are pruned: run.keep_checkpoints)
    while not _completed_from_step_2(checkpoints):
        assert proc.poll() is None, "the run ended before it was interrupted"
        assert time.monotonic() < deadline, "no checkpoint from step 2 on within 600 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out
    said = [
        line for line in out.splitlines() if line.startswith(("interrupted", "latest checkpoint", "no check"))
    ]
    assert len(said) == 2 and said[0].startswith("interrupted after step ")
    assert "latest checkpoint:" in said[1] and "trainer.resume=auto" in said[1] and "rollout.n=4" in said[1]


def _completed_from_step_2(checkpoints: Path) -> bool:
    return any(int(p.parent.name.split("_")[1]) >= 2 for p in checkpoints.glob("step_*/COMPLETE"))
