"""``rrl sft``'s rows: the train / eval split, the seeded order of every epoch, and token batches.

The order of step ``s`` depends only on ``s`` (epoch ``s // steps_per_epoch``, a permutation seeded by
``run.seed`` and the epoch), so a resumed run continues from the checkpoint's step count alone.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import torch
from rich.console import Console

from reasoning_rl.config import Config
from reasoning_rl.data import DataError
from reasoning_rl.data.sft import SftExample, SftReport, load_sft_rows
from reasoning_rl.policy.batch import TokenBatch


@dataclass(frozen=True)
class SftData:
    """The split rows and the step plan of a run."""

    train: list[SftExample]
    val: list[SftExample]
    batch_size: int
    epochs: int
    shuffle: bool
    seed: int
    max_steps: int | None = None

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train) / self.batch_size)

    @property
    def total_steps(self) -> int:
        total = self.steps_per_epoch * self.epochs
        return min(total, self.max_steps) if self.max_steps is not None else total

    def step_rows(self, step: int) -> list[SftExample]:
        """The rows of optimizer step ``step`` (0-based)."""
        epoch, k = divmod(step, self.steps_per_epoch)
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(len(self.train), generator=gen).tolist()
        else:
            order = list(range(len(self.train)))
        return [self.train[i] for i in order[k * self.batch_size : (k + 1) * self.batch_size]]

    def fingerprint(self) -> dict[str, Any]:
        """The training rows as tokens, hashed: a resume on other rows is refused."""
        digest = hashlib.sha256()
        for ex in self.train:
            digest.update(json.dumps([ex.ids, ex.mask]).encode())
        return {"rows": len(self.train), "sha256": digest.hexdigest()}


def load_sft_data(cfg: Config, tokenizer: Any, console: Console) -> SftData:
    """Train and eval rows: ``data.val``, else ``sft.val_fraction`` of ``data.train`` held out (seeded)."""
    sft = cfg.sft
    report = SftReport()
    train = load_sft_rows(cfg.data.train, cfg.data, sft, tokenizer, seed=cfg.run.seed, report=report)
    if cfg.data.val:
        val = load_sft_rows(cfg.data.val, cfg.data, sft, tokenizer, seed=cfg.run.seed + 1, report=report)
    elif sft.val_fraction > 0:
        n_val = int(len(train) * sft.val_fraction)
        if n_val == 0 or n_val == len(train):
            raise DataError(
                f"sft.val_fraction={sft.val_fraction} of {len(train)} training rows leaves an empty "
                f"{'eval' if n_val == 0 else 'train'} split; raise or lower it, or give data.val"
            )
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.run.seed)).tolist()
        held = set(order[:n_val])
        val = [train[i] for i in sorted(held)]
        train = [ex for i, ex in enumerate(train) if i not in held]
    else:
        val = []
    console.print(f"sft data: {len(train)} train / {len(val)} eval rows ({report.summary()})")
    if report.skipped:
        console.print(
            f"[yellow]skipped {len(report.skipped)} malformed rows[/yellow] (first: {report.skipped[0]})"
        )
    return SftData(
        train, val, sft.batch_size, sft.epochs, cfg.data.shuffle, cfg.run.seed, max_steps=sft.max_steps
    )


def token_batch(rows: list[SftExample], pad_id: int) -> TokenBatch:
    """``rows`` as a ``TokenBatch``: the prompt is everything before the first trained token, and
    ``model_mask`` marks the trained (assistant) tokens after it, the loss mask of ``policy.sft``."""
    seqs, plens, masks = [], [], []
    for ex in rows:
        p = ex.mask.index(1)
        seqs.append(torch.tensor(ex.ids, dtype=torch.long))
        plens.append(p)
        masks.append(ex.mask[p:])
    batch = TokenBatch(seqs, plens, pad_id=pad_id)
    batch.model_mask = batch.pad(masks, 0).bool()
    return batch


def loss_tokens(rows: list[SftExample]) -> int:
    return sum(sum(ex.mask) for ex in rows)
