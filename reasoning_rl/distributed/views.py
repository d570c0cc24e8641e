"""A ``WorkerGroup`` seen as the models and the engine a step uses: ``PolicyView`` / ``ReferenceView`` /
``CriticView`` have the methods ``make_train_batch`` and ``update`` call on ``Policy`` / ``ReferencePolicy`` /
``Critic``, and ``GroupEngine`` is a ``RolloutEngine``. Each splits its rows over the ranks (``group.shards``),
calls every rank and gathers the per-row results back into the batch's [B, T] layout.

Loss normalisation: ``Policy.train_step`` and ``Critic.train_step`` all-reduce their normalisers and sum (not
average) the gradients over ranks, so the ranks' shards together give the one-rank update for any split; their
metrics are all-reduced too, so rank 0's are the step's (``micro_batches`` is rank 0's own count).

Public names (stable): ``PolicyView``, ``ReferenceView``, ``CriticView``, ``GroupEngine``, ``group_models``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import torch
from torch import Tensor

from reasoning_rl.algorithms import AggMode, LossConfig
from reasoning_rl.distributed.group import WorkerGroup
from reasoning_rl.distributed.rank import EngineRank, RankArgs, one_version
from reasoning_rl.distributed.worker import ModelWorker
from reasoning_rl.factory import Models
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import Completion, SamplingConfig
from reasoning_rl.trace import Progress


def _rows(x: Tensor | None, rows: range, width: int) -> Tensor | None:
    """Rows of a [B] or [B, T] tensor, per-token ones trimmed to the shard's longest response."""
    if x is None:
        return None
    return x[rows.start : rows.stop] if x.dim() == 1 else x[rows.start : rows.stop, :width]


def _split(group: WorkerGroup, batch: TokenBatch, *per_row: Tensor | None) -> list[tuple[Any, ...]]:
    """Per rank: (its TokenBatch, then each of ``per_row`` cut to its rows). One rank: the inputs as they are.
    (Each caller unpacks its tuples into the typed ``RankArgs`` of its method.)"""
    if group.world == 1:
        return [(batch, *per_row)]
    out = []
    for rows in group.shards(len(batch)):
        sub = batch.select(rows)
        out.append((sub, *(_rows(x, rows, sub.shape[1]) for x in per_row)))
    return out


def _gather(parts: list[Tensor], shape: tuple[int, int]) -> Tensor:
    """Per-rank [B_r, T_r] blocks back into one [B, T] tensor, padded with 0 like one rank's output."""
    if len(parts) == 1:
        return parts[0]
    out = torch.zeros(shape, dtype=parts[0].dtype)
    start = 0
    for p in parts:
        out[start : start + p.shape[0], : p.shape[1]] = p
        start += p.shape[0]
    return out


class PolicyView:
    """The policy of every rank, as one ``Policy``."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    def logprobs(self, batch: TokenBatch, *, with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
        outs = self.group.call(
            ModelWorker.policy_logprobs, [RankArgs(b, with_entropy) for (b,) in _split(self.group, batch)]
        )
        logp = _gather([o[0] for o in outs], batch.shape)
        # with_entropy: every rank's ``Policy.logprobs`` returned its entropy
        ent = _gather(cast(list[Tensor], [o[1] for o in outs]), batch.shape) if with_entropy else None
        return logp, ent

    def train_step(
        self,
        batch: TokenBatch,
        advantages: Tensor,
        old_logprobs: Tensor | None,
        ref_logprobs: Tensor | None,
        cfg: LossConfig,
        *,
        max_response_len: int | None = None,
        token_weights: Tensor | None = None,
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """``Policy.train_step``'s signature (a test holds the three alike). ``progress``: rank 0's
        micro-batches, where rank 0 runs in this process (``WorkerGroup.call``)."""
        args = _split(self.group, batch, advantages, old_logprobs, ref_logprobs, token_weights)
        return self.group.call(
            ModelWorker.policy_train_step,
            [
                RankArgs(b, adv, old, ref, cfg, max_response_len=max_response_len, token_weights=tw)
                for b, adv, old, ref, tw in args
            ],
            progress=progress,
        )[0]


class ReferenceView:
    """The frozen reference of every rank, as one ``ReferencePolicy``."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    def logprobs(self, batch: TokenBatch) -> Tensor:
        outs = self.group.call(ModelWorker.ref_logprobs, [RankArgs(b) for (b,) in _split(self.group, batch)])
        return _gather(outs, batch.shape)


class CriticView:
    """The critic of every rank, as one ``Critic``."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    def values(self, batch: TokenBatch) -> Tensor:
        outs = self.group.call(ModelWorker.critic_values, [RankArgs(b) for (b,) in _split(self.group, batch)])
        return _gather(outs, batch.shape)

    def train_step(
        self,
        batch: TokenBatch,
        returns: Tensor,
        old_values: Tensor,
        *,
        agg: AggMode = "token-mean",
        progress: Progress | None = None,
    ) -> dict[str, float]:
        """``Critic.train_step``'s signature (a test holds the three alike)."""
        args = _split(self.group, batch, returns, old_values)
        return self.group.call(
            ModelWorker.critic_train_step,
            [RankArgs(b, ret, old, agg=agg) for b, ret, old in args],
            progress=progress,
        )[0]


def group_models(group: WorkerGroup, *, ref: bool, critic: bool) -> Models:
    """The step's ``Models`` over ``group`` (which built a reference / critic exactly when these say so)."""
    return Models(
        PolicyView(group), ReferenceView(group) if ref else None, CriticView(group) if critic else None
    )


class GroupEngine:
    """Every rank's rollout engine as one ``RolloutEngine``: prompts are split over the ranks (data-parallel
    rollout); sleep / wake reach every rank. New weights come from ``Components.push_weights`` (each rank
    loads its own engine from its shards), never through the driver."""

    def __init__(self, group: WorkerGroup) -> None:
        self.group = group

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        return self.group.generate(prompts, sampling)

    def load_weights(self, named_tensors: Iterable[tuple[str, Tensor]], *, version: int) -> None:
        raise NotImplementedError(
            "the group's engines load weights rank by rank from the policy shards (Components.push_weights)"
        )

    def sleep(self, keep_weights: bool = True) -> None:
        self.group.call_engines(EngineRank.engine_sleep, keep_weights)

    def wake(self) -> None:
        self.group.call_engines(EngineRank.engine_wake)

    @property
    def asleep(self) -> bool:
        return self.group.call_engines(EngineRank.engine_asleep)[0]

    @property
    def version(self) -> int:
        """The policy version every rank's engine holds (each engine's own record; they must agree)."""
        return one_version(self.group.call_engines(EngineRank.engine_version))
