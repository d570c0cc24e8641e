"""Small Ray actors for the fault tests (a module Ray workers can import: test modules are not importable there)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any


class Rank:
    """A stand-in rank actor: answers, dies (os._exit), hangs or raises on demand."""

    def place(self) -> tuple[str, str, int]:
        import ray

        ctx = ray.get_runtime_context()
        return ray.util.get_node_ip_address(), ctx.get_node_id(), os.getpid()

    def work(self, mode: str, value: int) -> int:
        if mode == "die":
            os._exit(1)
        if mode == "hang":
            time.sleep(3600)
        if mode == "raise":
            raise RuntimeError("Gloo: Timed out waiting 2000ms for recv operation to complete")
        if mode == "slow":
            time.sleep(0.5)
        return value * 10

    def save_shard(self, directory: str, rank: int, die: bool) -> None:
        """A rank's part of a checkpoint; ``die``: half of it written, then the process is gone."""
        path = os.path.join(directory, f"shard_{rank}.pt")
        with open(path, "wb") as f:
            f.write(b"x" * 1000)
            f.flush()
            if die:
                os._exit(1)
            f.write(b"y" * 1000)


class SlowStreamWorker:
    """A rank's engine side: each prompt's completion takes ``delay`` seconds except the first (instant), or,
    with ``gate``, waits until that file exists; ``fail_after`` completions, it raises (a rank that breaks
    mid-stream)."""

    def __init__(
        self, delay: float, fail_after: int | None = None, die: bool = False, gate: str | None = None
    ) -> None:
        self.delay = delay
        self.fail_after = fail_after
        self.die = die  # at ``fail_after``: the process exits instead of raising
        self.gate = gate

    def stream(self, prompts: list[list[int]], sampling: Any) -> Iterator[Any]:
        from reasoning_rl.rollout import Completion

        for i, p in enumerate(prompts):
            if self.fail_after is not None and i >= self.fail_after:
                if self.die:
                    os._exit(1)
                raise RuntimeError(f"engine broke after {i} completions")
            if i and self.gate is None:
                time.sleep(self.delay)
            while i and self.gate is not None and not os.path.exists(self.gate):
                time.sleep(0.01)  # the test opens the gate: an event, not a delay
            tok = sampling.prompt_offset + i
            yield Completion(i, 0, p, [tok], [0.0], str(tok), "stop")

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        return list(self.stream(prompts, sampling))
