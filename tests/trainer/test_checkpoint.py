"""Checkpoints are atomic: a SIGKILL in the middle of a save leaves the previous one usable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

from reasoning_rl.checkpoint import CheckpointManager

SLOW_SAVER = r"""
import sys, time, torch
from pathlib import Path
from reasoning_rl.checkpoint import CheckpointManager
mgr = CheckpointManager(sys.argv[1], keep=5)
def payload(d: Path) -> None:
    torch.save({"w": torch.full((4,), 2.0)}, d / "model.pt")
    (d / "half").write_text("x")
    print("SAVING", flush=True)
    time.sleep(60)
mgr.save(2, payload, {"data": {"cursor": 2}})
"""


def _payload(value: float):
    return lambda d: torch.save({"w": torch.full((4,), value)}, d / "model.pt")


def test_save_latest_prune_and_state(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=2)
    for step in (1, 2, 3):
        mgr.save(step, _payload(float(step)), {"data": {"cursor": step}})
    assert [c.step for c in mgr.list()] == [2, 3]
    latest = mgr.latest()
    assert latest is not None and latest.step == 3
    assert CheckpointManager.load_trainer_state(latest.path)["data"] == {"cursor": 3}
    torch.manual_seed(5)
    mgr.save(5, _payload(5.0), {})
    a = torch.rand(3)
    CheckpointManager.load_rng(mgr.latest().path)  # type: ignore[union-attr]
    assert torch.equal(torch.rand(3), a)


def test_sigkill_during_save_keeps_previous(tmp_path: Path) -> None:
    root = tmp_path / "ck"
    mgr = CheckpointManager(root, keep=5)
    mgr.save(1, _payload(1.0), {"data": {"cursor": 1}})
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SAVER, str(root)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "SAVING"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert any(p.name.startswith(".tmp-") for p in root.iterdir())  # the torn save is on disk...
    latest = mgr.latest()
    assert latest is not None and latest.step == 1  # ...but never counts as a checkpoint
    assert torch.load(latest.path / "model.pt")["w"][0] == 1.0
    assert mgr.clean_stale() and not any(p.name.startswith(".tmp-") for p in root.iterdir())
    assert mgr.resolve("auto") == latest
