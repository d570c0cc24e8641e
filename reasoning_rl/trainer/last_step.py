"""Ctrl-C keeps the work of every finished step, under any ``trainer.checkpoint_every``.

A step's models change only from its update on (generation, grading and the old/ref log-prob passes read
them). So the first Ctrl-C before the update leaves the models exactly as the last finished step left them,
and with the sampler's, the frontier's and the RNG's state as they were at that step's end (``FinishedStep``,
kept at every step's end: a few small dicts) that step's checkpoint can still be written, the same one a
periodic checkpoint would have written there. From the update to the step's end Ctrl-C is held
(``UpdateGuard``): the step finishes, then the run stops and saves it. A second Ctrl-C still stops at once.
"""

from __future__ import annotations

import contextlib
import copy
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from reasoning_rl.checkpoint import rng_state
from reasoning_rl.config import TrainerConfig
from reasoning_rl.data import PromptSampler
from reasoning_rl.trainer.frontier import Frontier
from reasoning_rl.trainer.interrupt import interrupts_held


@dataclass(frozen=True)
class FinishedStep:
    """What a checkpoint of ``step`` holds besides the models, copied when the step finished."""

    step: int
    data: dict[str, Any]
    frontier: dict[str, Any] | None
    rng: dict[str, Any]

    @classmethod
    def now(cls, step: int, sampler: PromptSampler, frontier: Frontier | None) -> FinishedStep:
        # deep copies: the live objects move on with the next step
        return cls(
            step,
            copy.deepcopy(sampler.state()),
            copy.deepcopy(frontier.state()) if frontier is not None else None,
            rng_state(),
        )


class UpdateGuard:
    """Holds Ctrl-C from the start of a step's update to the end of the step (``release``), so no interrupt
    leaves half-updated models; ``updating`` says whether one could (where signals cannot be held: not the
    main thread)."""

    def __init__(self) -> None:
        self._held = ExitStack()
        self.updating = False

    def enter(self, step: int) -> None:
        self.updating = True
        self._held.enter_context(interrupts_held(f"step {step} (its update has begun)"))

    def release(self) -> None:
        """The step is finished: a Ctrl-C held since its update raises KeyboardInterrupt here."""
        self.updating = False
        self._held.close()

    def abandon(self) -> None:
        """The step ended in an error (already on its way out): put Ctrl-C's handler back, deliver nothing."""
        self.updating = False
        with contextlib.suppress(BaseException):
            self._held.__exit__(RuntimeError, RuntimeError("step abandoned"), None)


def checkpoint_due(trainer: TrainerConfig, step: int, minutes_since_save: float) -> bool:
    """Whether ``step``'s end saves a checkpoint: the last step, every ``checkpoint_every`` steps, and the first
    step boundary ``checkpoint_minutes`` after the last save (or the run's start)."""
    if step == trainer.steps:
        return True
    if trainer.checkpoint_every and step % trainer.checkpoint_every == 0:
        return True
    return bool(trainer.checkpoint_minutes) and minutes_since_save >= trainer.checkpoint_minutes
