"""The run's own sections: identity and device (run), steps and checkpoints (trainer), logging and evaluation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reasoning_rl.config.base import _Section


class RunConfig(_Section):
    name: str = Field(
        default="run", description="Run name: fills '{name}' in run.dir; shown in logs, the trace and W&B."
    )
    dir: str = Field(default="runs/{name}", description="Run directory; '{name}' is replaced by run.name.")
    seed: int = Field(
        default=0,
        description="Seeds prompt order, sampling and model init; same seed + config = same run on CPU.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto",
        description="Where the policy trains and the engine runs; auto: CUDA when visible, else CPU.",
    )
    doctor: bool = Field(default=True, description="Run `rrl doctor` checks before loading anything heavy.")


class TrainerConfig(_Section):
    steps: int = Field(
        default=100, ge=0, description="Training steps (one batch of prompts, one policy update each)."
    )
    batch_size: int = Field(default=8, ge=1, description="Prompts per step (each sampled rollout.n times).")
    checkpoint_every: int = Field(
        default=0, ge=0, description="Save a checkpoint every this many steps (0: by time only, see below)."
    )
    checkpoint_minutes: float = Field(
        default=30.0,
        ge=0,
        description="Also save at the first step end this many minutes after the last save: a preempted or "
        "crashed run loses at most this much plus one step, whatever a step takes (0: off). Ctrl-C always "
        "saves the last finished step.",
    )
    keep_checkpoints: int = Field(
        default=2, ge=1, description="Newest checkpoints kept on disk; older ones are deleted."
    )
    resume: str = Field(
        default="never", description="'never', 'auto' (latest checkpoint in run dir), or a checkpoint path."
    )
    export: bool = Field(
        default=True, description="Export the final policy as an HF model dir to run_dir/export/step_N."
    )
    overwrite: bool = Field(
        default=False, description="Allow starting fresh in a run dir that already has checkpoints."
    )
    force_resume: bool = Field(
        default=False,
        description="Resume even though trajectory-defining keys (model, "
        "data, seed, rollout, algorithm, optimizer) changed since the checkpoint (`--force`).",
    )


class LoggingConfig(_Section):
    console: Literal["rich", "plain", "none"] = Field(
        default="rich",
        description="rich: a live table on a terminal (plain lines when redirected); plain: one line per step; none: quiet.",
    )
    tensorboard: bool = Field(
        default=True, description="Write metrics and completions to run_dir/tensorboard/."
    )
    wandb: bool = Field(
        default=False, description="Log metrics and completions to Weights & Biases (needs wandb)."
    )
    wandb_project: str = Field(default="reasoning-rl", description="W&B project the run logs to.")
    samples: bool = Field(
        default=True, description="Write every step's prompts, responses and grades to samples/."
    )
    log_completions: int = Field(
        default=6,
        ge=0,
        description="Samples per step shown as TensorBoard text and a W&B "
        "table (the step's best, worst and errored in turn: prompt, response, ground "
        "truth, grade, reason); 0: none.",
    )
    heartbeat_s: float | None = Field(
        default=30.0,
        ge=0,
        description="Inside a step, a log line this often: stage, samples generated/graded, update micro-batch "
        "k/K (a live line instead on a terminal with console=rich); None: off; 0: at every report.",
    )
    engine_logs: bool = Field(
        default=False,
        description="Show the rollout engine's (vLLM's) own INFO/WARNING log "
        "lines and the libraries' progress bars; off: only their errors (`--verbose`).",
    )


class EvalConfig(_Section):
    every: int = Field(
        default=0, ge=0, description="Evaluate every k steps (0: only at the end when val is set)."
    )
    n: int = Field(
        default=1,
        ge=1,
        description="Samples per prompt (pass@k / maj@k use k = n; n > 1 needs temperature > 0).",
    )
    temperature: float = Field(
        default=0.0, ge=0.0, description="Sampling temperature for evaluation; 0: greedy (n = 1 only)."
    )
    max_tokens: int | None = Field(
        default=None, ge=1, description="Most response tokens; None: rollout.max_tokens."
    )
    max_prompts: int | None = Field(
        default=None, ge=1, description="Evaluate only the first N prompts; None: all."
    )
    at_start: bool = Field(
        default=False, description="Also evaluate before step 1 (a fresh run, not a resume)."
    )

    @model_validator(mode="after")
    def _samples_differ(self) -> EvalConfig:
        # Refused rather than sampled at a default temperature: pass@k depends on the temperature as much as on
        # k, so the number reported must be one the user chose (0.6-1.0 are the usual ones).
        if self.n > 1 and self.temperature == 0:
            raise ValueError(
                f"eval.n={self.n} at eval.temperature=0 (greedy) gives {self.n} copies of one answer, so "
                f"pass@{self.n} and maj@{self.n} would be pass@1; set eval.temperature (e.g. 0.6 or 1.0) or eval.n=1"
            )
        return self
