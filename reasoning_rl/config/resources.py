"""The ``resources`` section: how many training ranks a run has, where they run, and how the model work is
placed on them (the distributed trainer reads it; one rank in-process is the default)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reasoning_rl.config.base import _Section


class ResourcesConfig(_Section):
    nodes: int = Field(default=1, ge=1, description="Machines the run spans (one Ray node each).")
    ranks_per_node: int | None = Field(
        default=None,
        ge=1,
        description="Training ranks (SPMD model workers) per node. None: every visible GPU on CUDA, 1 on CPU.",
    )
    ray_address: str | None = Field(
        default=None,
        description="Ray cluster to join ('auto', 'HOST:PORT' or 'ray://HOST:PORT'). None: with one rank, no Ray; "
        "with several, a local Ray instance started by the run.",
    )
    placement: Literal["colocated", "split"] = Field(
        default="colocated",
        description="colocated: policy, reference and rollout engine share every rank's device (the engine sleeps "
        "during the update); split: rollout engines on their own `rollout_ranks`, weights broadcast to them.",
    )
    rollout_ranks: int = Field(
        default=0,
        ge=0,
        description="Ranks that only generate, with placement=split (0 with colocated).",
    )
    share_gpus: bool = Field(
        default=False,
        description="placement=split only: rollout rank i runs on training rank i's GPU, in a process of its own "
        "(ranks_per_node then counts the training ranks; rollout_ranks <= training ranks, one GPU each). One GPU "
        "then decodes while it trains: with rollout.max_lag > 0 the engine keeps generating during the update "
        "(issue 44: on one H100 the update beside decoding ran at 0.68x its speed alone, decoding not slowed). "
        "The memory plan gives the engine its share of the card for the whole step.",
    )
    collective_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="How long a collective or a worker call may take before the run stops naming the rank.",
    )

    @model_validator(mode="after")
    def _placement_matches(self) -> ResourcesConfig:
        if self.placement == "split" and self.rollout_ranks < 1:
            raise ValueError("resources.placement=split needs resources.rollout_ranks >= 1")
        if self.share_gpus and self.placement != "split":
            raise ValueError(
                "resources.share_gpus needs resources.placement=split (colocated engines already share the "
                "training ranks' GPUs, in the same process)"
            )
        if self.placement == "colocated" and self.rollout_ranks:
            raise ValueError(
                f"resources.rollout_ranks={self.rollout_ranks} needs resources.placement=split "
                "(colocated engines live on the training ranks)"
            )
        return self

    def training_ranks(self, ranks: int) -> int:
        """The training ranks among ``ranks`` (nodes x ranks_per_node): split placement's rollout ranks take
        devices of their own, except with ``share_gpus``, where they are extra processes on the training GPUs."""
        if self.placement == "split" and not self.share_gpus:
            return ranks - self.rollout_ranks
        return ranks
