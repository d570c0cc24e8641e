"""The ``Config`` that holds every section, and the checks that span sections.

Each section lives with its area: ``run`` (run, trainer, logging, eval), ``model`` (model, optim), ``data``,
``rollout``, ``grading``, ``algorithm`` and ``resources``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from reasoning_rl.config.algorithm import GROUP_BASELINE_ESTIMATORS, AlgorithmConfig
from reasoning_rl.config.base import _Section
from reasoning_rl.config.data import DataConfig
from reasoning_rl.config.grading import GradingConfig
from reasoning_rl.config.model import ModelConfig, OptimConfig
from reasoning_rl.config.resources import ResourcesConfig
from reasoning_rl.config.rollout import RolloutConfig
from reasoning_rl.config.run import EvalConfig, LoggingConfig, RunConfig, TrainerConfig
from reasoning_rl.config.sft import SftConfig


class Config(_Section):
    run: RunConfig = Field(
        default_factory=RunConfig, description="Name, directory, seed and device of the run."
    )
    model: ModelConfig = Field(description="The model to train (policy, reference and critic start from it).")
    data: DataConfig = Field(description="Datasets and how their rows become prompts and pick a grader.")
    rollout: RolloutConfig = Field(
        default_factory=RolloutConfig,
        description="Generation during training: engine, sampling, weight hand-off checks.",
    )
    algorithm: AlgorithmConfig = Field(
        default_factory=AlgorithmConfig,
        description="Advantage estimator, policy loss, KL, rollout correction, shaping.",
    )
    optim: OptimConfig = Field(
        default_factory=OptimConfig, description="Optimizer (AdamW) and learning-rate schedule."
    )
    grading: GradingConfig = Field(
        default_factory=GradingConfig,
        description="The grading runtime: workers, budgets, cache, grader options.",
    )
    eval: EvalConfig = Field(
        default_factory=EvalConfig, description="Evaluation on data.val during training and in `rrl eval`."
    )
    trainer: TrainerConfig = Field(
        default_factory=TrainerConfig, description="Steps, batch size, checkpoints, resume and export."
    )
    logging: LoggingConfig = Field(
        default_factory=LoggingConfig,
        description="Console, TensorBoard, W&B, samples and completions logging.",
    )
    resources: ResourcesConfig = Field(
        default_factory=ResourcesConfig, description="Training ranks, nodes and placement of the model work."
    )
    sft: SftConfig = Field(
        default_factory=SftConfig,
        description="Supervised fine-tuning (`rrl sft`): epochs, batches, lengths, eval split; see docs/sft.md.",
    )

    @model_validator(mode="after")
    def _batch_fits(self) -> Config:
        total = self.trainer.batch_size * self.rollout.n
        mb = self.algorithm.mini_batch_size
        if mb is not None and (mb > total or total % mb):
            raise ValueError(
                f"algorithm.mini_batch_size={mb} must divide trainer.batch_size*rollout.n={total}"
            )
        return self

    @model_validator(mode="after")
    def _groups_have_members(self) -> Config:
        if self.algorithm.advantage in GROUP_BASELINE_ESTIMATORS and self.rollout.n < 2:
            raise ValueError(
                f"rollout.n={self.rollout.n}: algorithm.advantage={self.algorithm.advantage!r} compares each sample "
                "with the other samples of its prompt, so a group of 1 has advantage 0 and trains nothing; set "
                "rollout.n >= 2, or use a batch-baseline estimator (algorithm.advantage=reinforce_pp)"
            )
        return self

    @model_validator(mode="after")
    def _cores_without_lora(self) -> Config:
        """Split placement serves LoRA through ``load_adapter``, one engine core's call (several cores would each
        need the adapter and its check, not built); colocated runs send merged weights, unproven with cores."""
        if self.rollout.engine_cores > 1 and self.model.lora.enabled:
            raise ValueError(
                f"rollout.engine_cores={self.rollout.engine_cores} cannot be used with model.lora (rank "
                f"{self.model.lora.rank}); set rollout.engine_cores=1"
            )
        return self

    @model_validator(mode="after")
    def _continuous_fits(self) -> Config:
        """``rollout.max_lag > 0`` keeps requests in the run's continuous engines across updates (one in-process
        engine, several colocated ranks' or split placement's rollout ranks'): what cannot do that is refused
        here (issue 31)."""
        r = self.resources
        if not self.rollout.overlap and (self.rollout.max_lag == 0 or r.placement != "split"):
            raise ValueError(
                "rollout.overlap=false pauses split placement's continuous rollout ranks: it needs "
                "resources.placement=split and rollout.max_lag > 0; remove it"
            )
        capacity = self.trainer.batch_size * (1 + self.rollout.max_lag)
        if (running := self.rollout.running_groups) is not None and running > capacity:
            raise ValueError(
                f"rollout.running_groups={running} is more than trainer.batch_size x (1 + rollout.max_lag) = "
                f"{capacity}, the most groups that may be untrained at once; lower it or raise rollout.max_lag"
            )
        if self.rollout.max_lag == 0:
            return self
        clash = (
            "algorithm.old_logprobs=rollout (decoupled PPO needs the trainer's proximal recompute)"
            if self.algorithm.old_logprobs == "rollout"
            else "model.lora on split placement (the adapter reload under resident requests is not proven)"
            if self.model.lora.enabled and r.placement == "split"
            else None
        )
        if clash is not None:
            raise ValueError(
                f"rollout.max_lag={self.rollout.max_lag} cannot be used with {clash}; set rollout.max_lag=0"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir.format(name=self.run.name))
