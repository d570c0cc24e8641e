"""verl's replay buffer, polled every 0.05 s instead of its fixed 2 s (verl 0.9.1 ``ReplayBuffer(poll_interval=2.0)``,
not exposed in its config): the sync trainer checks for finished generations only on that tick, so a step's
generation phase ends on the next 2-s boundary. Loaded through verl's own plug-in point
(``trainer.v1.sampler.custom_sampler.{path,name}``) by setting S3 of ``verl_runs.py``, to measure that wait.
"""

from typing import Any

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer


class FastPollReplayBuffer(ReplayBuffer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["poll_interval"] = 0.05
        super().__init__(*args, **kwargs)
