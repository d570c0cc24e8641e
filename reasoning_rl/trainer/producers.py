"""What fills a frontier group's samples when a sample is more than one engine request: ``ToolTurns`` runs each
sample as a multi-turn tool trajectory (``rollout.tools``) through the ``ToolLoop``, over the same engine and
in the same submit / advance steps as single-turn groups. A sample's seeds are those of the streamed-wave
path it replaced (``trajectory_seed`` of the step's seed, the group's place in its admission, the sample), so
``max_lag = 0`` samples what that path sampled; an unfinished trajectory parked at a weight swap or saved in a
checkpoint restarts from its prompt with the same seeds, so a resume loses nothing and repeats the attempt."""

from __future__ import annotations

from collections.abc import Sequence

from reasoning_rl.rollout import Completion, Delta, Request, SamplingConfig
from reasoning_rl.rollout.multiturn import ToolLoop, ToolTrajectory, trajectory_seed
from reasoning_rl.rollout.toolset import ToolSet

Key = tuple[int, int]  # (ticket, sample)


class ToolTurns:
    """The tool trajectories of a frontier's groups, keyed by (ticket, sample)."""

    def __init__(self, tools: ToolSet, sampling: SamplingConfig) -> None:
        self.tokenizer = tools.tokenizer
        self.loop = ToolLoop(tools.tools, tools.tokenizer, tools.rollout_config(sampling))
        self.started: dict[Key, ToolTrajectory] = {}

    def start(self, key: Key, prompt_ids: Sequence[int], seed: int | None, offset: int) -> None:
        """Sample ``key[1]`` of group ``key[0]``, the ``offset``-th group admitted in its step with ``seed``."""
        ticket, sample = key
        base = None if seed is None else trajectory_seed(seed, offset, sample, 0)
        t = ToolTrajectory(ticket, sample, list(prompt_ids), seed=base)
        self.started[key] = t
        self.loop.start(t)

    def requests(self) -> list[Request]:
        return self.loop.requests()

    def owns(self, rid: str) -> bool:
        return self.loop.owns(rid)

    def take(self, delta: Delta) -> None:
        self.loop.take(delta)

    def in_engine(self) -> int:
        return len(self.loop.live)

    def waiting(self) -> bool:
        """Trajectories out of the engine but unfinished: in a tool call or about to be submitted."""
        return bool(self.loop.calls or self.loop.ready)

    def poll(self, timeout: float | None) -> list[Completion]:
        """The trajectories finished by now (tool results waited for up to ``timeout`` s, None: one lands)."""
        self.loop.poll(timeout)
        done = self.loop.pop_finished()
        for t in done:
            del self.started[(t.prompt_index, t.sample_index)]
        return [t.completion(self.tokenizer) for t in done]

    def park(self) -> tuple[list[str], list[Key]]:
        """Stop every unfinished trajectory: the request ids to abort and the keys to restart from the prompt."""
        ids, _ = self.loop.drop()
        keys = list(self.started)
        self.started.clear()
        return ids, keys

    def close(self) -> None:
        self.loop.close()
