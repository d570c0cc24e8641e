"""Seeded, resumable prompt order: a fresh permutation per epoch, position saved in checkpoints."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass
class PromptSampler:
    """Yields dataset indices batch by batch; ``state()``/``load_state()`` make resume exact."""

    size: int
    seed: int
    shuffle: bool = True
    epoch: int = 0
    cursor: int = 0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("cannot sample from an empty dataset")

    def _order(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self, batch_size: int) -> list[int]:
        out: list[int] = []
        while len(out) < batch_size:
            order = self._order(self.epoch)
            take = min(batch_size - len(out), self.size - self.cursor)
            out.extend(order[self.cursor : self.cursor + take])
            self.cursor += take
            if self.cursor >= self.size:
                self.epoch, self.cursor = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "cursor": self.cursor, "size": self.size, "seed": self.seed}

    def load_state(self, state: dict[str, Any]) -> None:
        if state.get("size") != self.size:
            raise ValueError(
                f"checkpoint was taken on a dataset of {state.get('size')} prompts, this one has {self.size}: "
                "the data changed, so the run cannot resume exactly"
            )
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
