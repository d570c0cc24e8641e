"""`rrl train` / `rrl export` as a user runs them, on the tiny model with the plain-transformers engine (no vLLM):
errors on stderr, resume refusals, self-contained exports, the final eval, samples, and progress on a pipe."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.trainer.test_train_e2e import REPO, config, env, metrics, train_cmd

pytestmark = pytest.mark.slow


def hf_config(tmp_path: Path, model: Path | str, name: str, **sections: Any) -> Path:
    sections["rollout"] = {"engine": "hf", "n": 4, **sections.get("rollout", {})}
    sections["trainer"] = {"steps": 2, "batch_size": 2, **sections.get("trainer", {})}
    return config(tmp_path, Path(model), name, **sections)


def run(
    cmd: list[str], *, cwd: Path = REPO, extra_env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env={**env(), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lambda: os.umask(0o022),
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, the message on stderr (not stdout), no traceback."""
    err = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "error:" in err and "error:" not in proc.stdout
    for needle in needles:
        assert needle in err, err[-2000:]
    return err


def test_torchrun_world_size_is_refused(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: every torchrun rank trained a full copy into the same run dir, exit 0. The refusal names the
    way that exists (issue 47: it said multi-rank training "is coming")."""
    cfg = hf_config(tmp_path, tiny_model_dir, "ranks")
    proc = run(train_cmd(cfg), extra_env={"WORLD_SIZE": "2", "RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    err = user_error(proc, "WORLD_SIZE=2", "without torchrun", "resources.ranks_per_node")
    assert "coming" not in err
    assert not (tmp_path / "ranks").exists()


def test_user_errors_go_to_stderr(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: `rrl train` / `rrl eval` printed their errors to stdout."""
    cfg = hf_config(tmp_path, tiny_model_dir, "typo")
    user_error(run(train_cmd(cfg, "rollout.temprature=2")), "rollout.temprature: unknown key")
    user_error(
        run([sys.executable, "-m", "reasoning_rl.cli", "eval", "--model", str(tiny_model_dir)]),
        "needs CONFIG.yaml, or both --model and --data",
    )


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("wandb") is not None, reason="wandb is installed"
)
def test_missing_wandb_fails_before_loading_the_model(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: a RuntimeError traceback, after the model, engine and data were loaded."""
    proc = run(train_cmd(hf_config(tmp_path, tiny_model_dir, "wb"), "logging.wandb=true"))
    user_error(proc, "logging.wandb=true but wandb is not installed")
    assert "model:" not in proc.stdout  # nothing heavy was loaded


def test_resume_refuses_changed_data_and_keys_and_keeps_config(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: a changed dataset was a ValueError traceback after config.yaml had been overwritten; changed
    trajectory keys (lr, seed, ...) were accepted silently."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"question": f"say {i}", "answer": "7"}) + "\n" for i in range(8)))
    cfg = hf_config(tmp_path, tiny_model_dir, "res", data={"train": {"path": str(rows)}})
    ok(run(train_cmd(cfg)))
    run_dir = tmp_path / "res"
    before = (run_dir / "config.yaml").read_bytes()

    user_error(
        run(train_cmd(cfg, "trainer.resume=auto", "trainer.steps=3", "optim.lr=0.02", "run.seed=3")),
        "optim.lr: 0.01 -> 0.02",
        "run.seed: 0 -> 3",
        "--force",
    )
    rows.write_text("".join(json.dumps({"question": f"say {i}", "answer": "8"}) + "\n" for i in range(8)))
    user_error(
        run(train_cmd(cfg, "trainer.resume=auto", "trainer.steps=3")),
        "the training data changed since that checkpoint (same count (8) but different rows)",
    )
    assert (run_dir / "config.yaml").read_bytes() == before  # still describes the checkpoints

    forced = ok(run(train_cmd(cfg, "trainer.resume=auto", "trainer.steps=3", "optim.lr=0.02", "--force")))
    assert "resuming with --force although optim.lr: 0.01 -> 0.02" in " ".join(forced.stdout.split())
    assert "resumed from" in forced.stdout
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == 0.02
    assert [r["step"] for r in metrics(run_dir) if "reward/mean" in r] == [1, 2, 3]


def test_resume_auto_without_checkpoint_says_so_and_keeps_metrics(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Before: it started fresh silently and deleted the crashed run's metrics.jsonl."""
    cfg = hf_config(tmp_path, tiny_model_dir, "crashed")
    run_dir = tmp_path / "crashed"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.25}\n')
    proc = ok(run(train_cmd(cfg, "trainer.resume=auto")))
    out = " ".join(proc.stdout.split())
    assert "no complete checkpoint in" in out and "starting fresh" in out
    assert "previous metrics.jsonl kept as metrics.1.jsonl" in out
    assert (run_dir / "metrics.1.jsonl").read_text() == '{"step": 1, "reward/mean": 0.25}\n'


def test_exports_are_self_contained_identical_in_layout_and_readable(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Before: `rrl export` rebuilt the model from the config's relative base-model path (so it failed from
    another directory), the two exports differed (use_cache false vs true, export/ vs export/step_N), and
    export and checkpoint dirs were 0700."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(tiny_model_dir, work / "base")
    cfg = hf_config(tmp_path, "base", "exp", run={"dir": "runs/exp"}, trainer={"export": True})
    ok(run(train_cmd(cfg), cwd=work))
    run_dir = work / "runs" / "exp"
    shutil.rmtree(work / "base")  # the base model is gone: the checkpoint alone must do
    moved = tmp_path / "elsewhere" / "exp"
    shutil.move(str(run_dir), moved)
    final = moved / "export" / "step_2"
    again = tmp_path / "again"
    ok(run([sys.executable, "-m", "reasoning_rl.cli", "export", str(moved), "-o", str(again)], cwd=tmp_path))

    from transformers import AutoModelForCausalLM

    from reasoning_rl.policy.sharded import read_model_state

    assert sorted(p.name for p in final.iterdir()) == sorted(p.name for p in again.iterdir())
    for d in (final, again):
        assert json.loads((d / "config.json").read_text())["use_cache"] is True
    ckpt = read_model_state(moved / "checkpoints" / "step_2" / "policy")
    for d in (final, again):
        exported = AutoModelForCausalLM.from_pretrained(d).state_dict()
        for key, value in ckpt.items():
            torch.testing.assert_close(exported[key.removeprefix("lm.")], value)
    for d in (final, again, moved / "checkpoints" / "step_2", moved / "checkpoints" / "step_2" / "hf"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o755, d


def test_final_eval_at_last_step_and_rows_carry_prompt_and_truth(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """Before: no eval at the last step unless trainer.steps % eval.every == 0; samples/ and eval rows had
    neither the prompt (unrecoverable for generator data) nor the ground truth."""
    cfg = hf_config(
        tmp_path,
        tiny_model_dir,
        "ev",
        trainer={"steps": 3},
        data={"val": {"generator": "fixed_digit", "size": 3}},
        eval={"every": 2},
    )
    ok(run(train_cmd(cfg)))
    run_dir = tmp_path / "ev"
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == ["step_2.jsonl", "step_3.jsonl"]
    assert [r["step"] for r in metrics(run_dir) if "eval/mean_score" in r] == [2, 3]
    for path in (run_dir / "samples" / "step_1.jsonl", run_dir / "eval" / "step_3.jsonl"):
        for row in map(json.loads, path.read_text().splitlines()):
            assert row["prompt"][-1]["role"] == "user" and row["prompt"][-1]["content"]
            assert row["ground_truth"] not in (None, "")


def test_progress_on_a_pipe_is_one_unwrapped_line_per_step(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Before: with stdout not a terminal the default rich console showed nothing until the run ended, and
    wrapped lines at 80 columns."""
    cfg = hf_config(tmp_path, tiny_model_dir, "pipe", trainer={"steps": 12}, logging={"console": "rich"})
    proc = subprocess.Popen(
        train_cmd(cfg), cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    seen: list[str] = []
    running_at_first_step = None
    deadline = time.time() + 300
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("step 1:") and running_at_first_step is None:
            running_at_first_step = proc.poll() is None
        assert time.time() < deadline
    assert proc.wait(timeout=60) == 0
    assert running_at_first_step, "the first step's line arrived only when the run ended"
    steps = [line for line in seen if line.startswith("step ")]
    assert len(steps) == 12 and all(line.endswith("\n") for line in steps)
    assert all(len(line) > 80 and "gen tok/s=" in line for line in steps)  # long lines, not wrapped
