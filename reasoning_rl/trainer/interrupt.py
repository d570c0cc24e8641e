"""Ctrl-C in ``rrl train``: a checkpoint being written finishes first, then the run stops and says after which
step, which checkpoint exists and how to continue from it (or that there is none to continue from)."""

from __future__ import annotations

import os
import shlex
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.config import Config


def interrupted_message(cfg: Config, completed: int, config_path: str, overrides: list[str]) -> list[str]:
    """The lines to print; ``completed`` is the last step that finished (0: none)."""
    total = cfg.trainer.steps
    done = f"after step {completed} of {total}" if completed else f"before step 1 of {total} finished"
    lines = [f"interrupted {done}; run dir {cfg.run_dir}"]
    latest = CheckpointManager(cfg.run_dir / "checkpoints").latest()
    if latest is None:
        # Ctrl-C saves the last finished step (trainer/last_step.py): none is left only if none finished
        why = "no step had finished" if not completed else f"the save of step {completed} was stopped"
        lines.append(f"no checkpoint to continue from ({why}); a rerun starts over")
        return lines
    kept = [o for o in overrides if not o.startswith("trainer.resume=")]
    command = shlex.join(["rrl", "train", config_path, *kept, "trainer.resume=auto"])
    lines.append(f"latest checkpoint: {latest.path} (step {latest.step}); continue with: {command}")
    return lines


@contextmanager
def interrupts_held(what: str) -> Iterator[None]:
    """Hold the first SIGINT while ``what`` runs, then deliver it to the handler that was there before; a second
    one is delivered at once (a hung save must still be stoppable) and ``what`` is lost.

    Why: a Ctrl-C inside DCP's save is caught by DCP and re-raised as its own ``CheckpointException``, so the run
    ended with exit 1 and a traceback instead of 130 and the resume line, and the step's checkpoint was lost.
    Outside the main thread signals cannot be handled, and a handler installed outside Python cannot be put back,
    so nothing is held there."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield
        return
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)
        if len(held) == 1:  # os.write: print() is not safe inside a signal handler (reentrant buffered I/O)
            os.write(
                2, f"interrupt: finishing {what} first, then stopping (Ctrl-C again: stop now)\n".encode()
            )
            return
        signal.signal(signal.SIGINT, previous)
        if callable(previous):
            previous(signum, frame)  # Python's default: KeyboardInterrupt, here and now
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    except Exception as exc:
        if len(held) > 1:  # the second press's KeyboardInterrupt, wrapped by the code it interrupted (DCP)
            raise KeyboardInterrupt(f"{what} interrupted") from exc
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        signal.raise_signal(signal.SIGINT)  # the previous handler decides: KeyboardInterrupt, ignore or exit
