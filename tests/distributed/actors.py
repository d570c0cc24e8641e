"""Small Ray actors for the fault tests (a module Ray workers can import: test modules are not importable there)."""

from __future__ import annotations

import os
import time
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


class GenerateWorker:
    """A rank's engine side for ``WorkerGroup.stream`` over Ray ranks: prompt i of a share answers token
    ``prompt_offset + i``; after ``fail_after`` prompts it raises, or with ``die`` its process exits."""

    def __init__(self, fail_after: int | None = None, die: bool = False) -> None:
        self.fail_after = fail_after
        self.die = die

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        from reasoning_rl.rollout import Completion

        if self.fail_after is not None and len(prompts) > self.fail_after:
            if self.die:
                os._exit(1)
            raise RuntimeError(f"engine broke after {self.fail_after} completions")
        return [
            Completion(i, 0, p, [sampling.prompt_offset + i], [0.0], str(i), "stop")
            for i, p in enumerate(prompts)
        ]
