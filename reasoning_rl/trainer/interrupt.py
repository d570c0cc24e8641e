"""What ``rrl train`` says when Ctrl-C stops it: after which step, which checkpoint exists and how to continue
from it (or that there is none to continue from), in at most three lines."""

from __future__ import annotations

import shlex

from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.config import Config


def interrupted_message(cfg: Config, completed: int, config_path: str, overrides: list[str]) -> list[str]:
    """The lines to print; ``completed`` is the last step that finished (0: none)."""
    total = cfg.trainer.steps
    done = f"after step {completed} of {total}" if completed else f"before step 1 of {total} finished"
    lines = [f"interrupted {done}; run dir {cfg.run_dir}"]
    latest = CheckpointManager(cfg.run_dir / "checkpoints").latest()
    if latest is None:
        every = cfg.trainer.checkpoint_every
        why = f"trainer.checkpoint_every={every}" + (": only the final step saves one" if every == 0 else "")
        lines.append(f"no checkpoint to continue from ({why}); a rerun starts over")
        return lines
    kept = [o for o in overrides if not o.startswith("trainer.resume=")]
    command = shlex.join(["rrl", "train", config_path, *kept, "trainer.resume=auto"])
    lines.append(f"latest checkpoint: {latest.path} (step {latest.step}); continue with: {command}")
    return lines
