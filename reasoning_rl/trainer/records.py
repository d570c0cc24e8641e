"""The typed records a step passes between its stages: ``Rollouts`` (generate + grade) -> ``TrainBatch``
(what the update consumes). Every record carries its own ids (example uid, sample index, group), so no
stage keeps a parallel list beside it; a ``TrainBatch`` row selection (a mini-batch, or a data-parallel
rank's shard) takes every per-row tensor with it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from torch import Tensor

from graders.compose import ComposedReward
from graders.types import Grade
from reasoning_rl.data import Example
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import Completion

OldLogprobSource = Literal["policy", "engine", "recompute"]
"""Where the PPO ratio's old log-probs come from, decided once per run (``trainer.plan``): the policy's own,
detached (one on-policy update: ratio exactly 1, no pass), the engine's (``Completion.logprobs``), or a
trainer pass over the batch before the update."""


@dataclass(frozen=True)
class Sample:
    """One graded response. ``group`` is the prompt's position in the step (the GRPO group id). With a composed
    reward (``grading.rewards``), ``grade`` is the combined verdict and ``composed`` holds every component."""

    group: int
    example: Example
    completion: Completion
    grade: Grade
    composed: ComposedReward | None = None

    @property
    def reward(self) -> float:
        """The grader's reward: the weighted sum of a composed reward, else the grade's score."""
        return self.composed.reward if self.composed is not None else self.grade.score

    @property
    def id(self) -> str:
        """``uid#sample``: the example's id and which of its n samples this is."""
        return f"{self.example.uid}#{self.completion.sample_index}"

    @property
    def masked(self) -> bool:
        """The grader could not judge it (verdict ``error``): no reward, no gradient."""
        return self.grade.verdict == "error"


@dataclass
class Rollouts:
    """One step's graded samples, in (group, sample) order: the output of generate-and-grade."""

    samples: list[Sample] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    @property
    def groups(self) -> set[int]:
        return {s.group for s in self.samples}

    @property
    def tokens(self) -> int:
        """Generated tokens over all samples."""
        return sum(len(s.completion.token_ids) for s in self.samples)

    def keep_groups(self, groups: set[int]) -> Rollouts:
        return Rollouts([s for s in self.samples if s.group in groups])

    def extend(self, other: Rollouts) -> None:
        self.samples.extend(other.samples)


@dataclass
class TrainBatch:
    """The judged samples of a step as [B] / [B, T] tensors (T = longest response): everything the update reads.

    ``rewards`` are what the advantage estimator saw (grade score, overlong penalty, KL-in-reward);
    ``loss_mask`` marks real response tokens. Log-probs are named by origin: the engine's
    (``rollout_logprobs``), the trainer's recompute before the update (``recomputed_logprobs``) and the
    reference's (``ref_logprobs``); ``old_logprobs`` picks the run's ``old_source`` among them.
    ``values``/``returns`` are the critic's (PPO only). ``correction_weights`` are the per-token loss weights
    of the rollout-mismatch correction (``algorithm.rollout_correction``; None = 1).
    """

    tokens: TokenBatch
    sample_ids: list[str]
    group_ids: Tensor
    rewards: Tensor
    advantages: Tensor
    old_source: OldLogprobSource
    recomputed_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None
    values: Tensor | None = None
    returns: Tensor | None = None
    correction_weights: Tensor | None = None

    def __len__(self) -> int:
        return len(self.sample_ids)

    @property
    def loss_mask(self) -> Tensor:
        return self.tokens.response_mask

    @property
    def rollout_logprobs(self) -> Tensor | None:
        return self.tokens.rollout_logprobs

    @property
    def old_logprobs(self) -> Tensor | None:
        """The ratio's denominator; None = the policy's own, detached, inside the update."""
        if self.old_source == "engine":
            if self.rollout_logprobs is None:
                raise ValueError("old log-probs come from the engine, but it returned none for this batch")
            return self.rollout_logprobs
        if self.old_source == "recompute":
            if self.recomputed_logprobs is None:
                raise ValueError("old log-probs are recomputed, but the batch carries none")
            return self.recomputed_logprobs
        return None

    def select(self, rows: Sequence[int]) -> TrainBatch:
        """These rows (a mini-batch or a rank's shard), per-token tensors trimmed to their longest response."""
        idx = list(rows)
        tokens = self.tokens.select(idx)
        width = tokens.shape[1]

        def per_token(x: Tensor | None) -> Tensor | None:
            return None if x is None else x[idx, :width]

        return replace(
            self,
            tokens=tokens,
            sample_ids=[self.sample_ids[i] for i in idx],
            group_ids=self.group_ids[idx],
            rewards=self.rewards[idx],
            advantages=self.advantages[idx] if self.advantages.dim() == 1 else self.advantages[idx, :width],
            recomputed_logprobs=per_token(self.recomputed_logprobs),
            ref_logprobs=per_token(self.ref_logprobs),
            values=per_token(self.values),
            returns=per_token(self.returns),
            correction_weights=per_token(self.correction_weights),
        )
