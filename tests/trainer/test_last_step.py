"""Ctrl-C keeps every finished step (issue 47): under the default ``trainer.checkpoint_every: 0`` the first Ctrl-C
discarded every finished step. Now the update holds Ctrl-C to the step's end, and a checkpoint of the last
finished step is written on the way out (``reasoning_rl/trainer/last_step.py``); checkpoints also come by time."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from reasoning_rl.trainer.last_step import UpdateGuard, checkpoint_due
from tests.trainer.test_run_guards import _cfg


def test_checkpoints_come_by_steps_by_time_and_at_the_end(tmp_path: Path) -> None:
    """Issue 47: under the old default (checkpoint_every=0) a long run saved nothing before its last step; now
    the first step end 30 minutes (trainer.checkpoint_minutes) after the last save saves one too."""
    cfg, _ = _cfg(tmp_path)
    t = cfg.trainer
    assert t.checkpoint_every == 0 and t.checkpoint_minutes == 30  # the defaults
    assert [s for s in range(1, 11) if checkpoint_due(t, s, 0.0)] == [10]  # the last step always
    assert checkpoint_due(t, 3, 30.0) and not checkpoint_due(t, 3, 29.9)  # by time
    off = t.model_copy(update={"checkpoint_minutes": 0.0, "checkpoint_every": 4})
    assert [s for s in range(1, 11) if checkpoint_due(off, s, 1e9)] == [4, 8, 10]  # by steps only


def test_the_update_guard_holds_ctrl_c_to_the_step_end_and_abandon_delivers_nothing(
    capfd: pytest.CaptureFixture[str],
) -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # not the inherited disposition
    try:
        guard = UpdateGuard()
        guard.enter(3)
        assert guard.updating
        signal.raise_signal(signal.SIGINT)  # the first Ctrl-C inside the update: held
        with pytest.raises(KeyboardInterrupt):
            guard.release()  # delivered at the step's end
        assert not guard.updating
        assert "finishing step 3 (its update has begun) first" in capfd.readouterr().err
        guard.enter(4)
        signal.raise_signal(signal.SIGINT)
        guard.abandon()  # the step failed: the handler is back and nothing is raised
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
