"""The sections of a run's config and the ``Config`` that holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from reasoning_rl.config.algorithm import GROUP_BASELINE_ESTIMATORS, AlgorithmConfig
from reasoning_rl.config.base import _Section
from reasoning_rl.config.resources import ResourcesConfig
from reasoning_rl.registry import ENGINES


class RunConfig(_Section):
    name: str = "run"
    dir: str = Field(default="runs/{name}", description="Run directory; '{name}' is replaced by run.name.")
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    doctor: bool = Field(default=True, description="Run `rrl doctor` checks before loading anything heavy.")


class ModelConfig(_Section):
    path: str = Field(
        description="Local HF model dir, hub name, or a dir holding a GGUF file (see gguf_file)."
    )
    gguf_file: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gradient_checkpointing: bool = False
    ref_offload: bool = Field(default=False, description="Keep the frozen reference policy on CPU.")
    fsdp: Literal["auto", "on", "off"] = "auto"
    cpu_offload: bool = Field(
        default=False,
        description="FSDP2 CPU offload (CPUOffloadPolicy) of the policy's and critic's parameters, gradients "
        "and optimizer state: the optimizer step runs on CPU. Needs FSDP2.",
    )
    reduce_dtype: Literal["float32", "bfloat16"] = Field(
        default="float32",
        description="dtype of FSDP2's gradient reduce-scatter (MixedPrecisionPolicy.reduce_dtype); "
        "bfloat16 halves its bytes.",
    )
    reshard_after_forward: bool = Field(
        default=True,
        description="FSDP2: free each decoder layer's gathered weights after forward and all-gather them "
        "again in backward; false keeps them (one all-gather fewer per layer and micro-batch, more memory).",
    )
    forward_prefetch: int = Field(
        default=0,
        ge=0,
        description="FSDP2: prefetch the all-gathers of the next N decoder layers in forward (and of the "
        "previous N in backward) explicitly; 0: FSDP2's default prefetching.",
    )
    compile: bool | None = Field(
        default=None,
        description="torch.compile each decoder layer and the log-prob head "
        "of the trained models (faster updates after a one-off compile; one graph serves "
        "every micro-batch shape). None: on when training on CUDA, off on CPU.",
    )


class SourceConfig(_Section):
    """One dataset: a file/dir/hub name (``path``) or a built-in seeded generator (``generator``)."""

    path: str | None = None
    split: str = "train"
    generator: Literal["arithmetic", "fixed_digit"] | None = None
    size: int = Field(default=256, ge=1, description="Rows to generate (generator only).")
    options: dict[str, Any] = Field(default_factory=dict, description="Generator options.")
    limit: int | None = Field(default=None, ge=1, description="Use only the first N rows.")
    data_source: str | None = Field(default=None, description="Default data_source for rows that have none.")

    @model_validator(mode="after")
    def _one_of(self) -> SourceConfig:
        if (self.path is None) == (self.generator is None):
            raise ValueError("set exactly one of 'path' or 'generator'")
        return self


class RowConfig(_Section):
    """How rows become examples: the row keys of ``data`` (which extends this), read by ``data.schema``."""

    prompt_template: str = Field(
        default="{question}",
        description="Python format string applied to simple rows ({question}, plus any column).",
    )
    system_prompt: str | None = None
    grader_map: dict[str, str] = Field(
        default_factory=dict,
        description="data_source or ability -> grader name (explicit row 'grader' wins).",
    )
    default_grader: str = "math"


class DataConfig(RowConfig):
    train: list[SourceConfig] = Field(min_length=1)
    val: list[SourceConfig] = Field(default_factory=list)
    chat_template: bool | str = Field(
        default=True,
        description="true: wrap prompts with the tokenizer's chat "
        "template; false: plain text; a string: this Jinja chat template instead, "
        "inline (contains '{%' or '{{') or a file path (relative to the working "
        "directory).",
    )
    on_bad_row: Literal["error", "skip"] = "error"
    max_prompt_tokens: int = Field(default=1024, ge=1)
    shuffle: bool = True

    @model_validator(mode="before")
    @classmethod
    def _single_source(cls, data: Any) -> Any:
        """Allow ``train: {path: ...}`` as shorthand for a one-element list."""
        if isinstance(data, dict):
            for key in ("train", "val"):
                if isinstance(data.get(key), dict | str):
                    value = data[key]
                    data = {**data, key: [{"path": value} if isinstance(value, str) else value]}
        return data


class SamplingParams(_Section):
    """What to sample per prompt (``temperature=0`` is greedy): the sampling keys of ``rollout`` (which
    extends this) and of every engine request (``rollout.SamplingConfig``)."""

    n: int = Field(default=1, ge=1, description="Samples per prompt.")
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=256, ge=1)
    stop: list[str] = Field(default_factory=list)
    ignore_eos: bool = Field(
        default=False, description="Generate exactly max_tokens (fixed-length benchmarks)."
    )


class RolloutConfig(SamplingParams):
    n: int = Field(default=8, ge=1, description="Samples per prompt (the GRPO group size).")
    engine: str = Field(
        default="auto",
        description="'auto' (vLLM when installed, else hf), or a name of the "
        "engine registry: vllm, hf, or a plugin's.",
    )
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0.0, le=1.0, description="None: 0.2 on CPU, 0.5 on GPU."
    )
    sleep: bool | None = Field(default=None, description="vLLM sleep mode while training; None: on for GPU.")
    handoff_bucket_mb: int = Field(
        default=256,
        ge=1,
        description="Weight hand-off: full tensors gathered and loaded into the engine per bucket, in MiB "
        "(bigger: fewer engine calls, more transient memory).",
    )
    seed_per_sample: bool | None = Field(
        default=None,
        description="Seed every sample (run.seed, step, sample "
        "index): reproducible rollouts, but vLLM then draws each sequence's noise "
        "with its own generator (a kernel per sequence per token); false: one "
        "engine-wide stream. None: on for CPU, off on CUDA (where batched kernels "
        "are not bitwise reproducible anyway).",
    )
    freshness_check: bool = Field(
        default=True,
        description="After every weight hand-off, prove the engine serves "
        "the trainer's weights (per-tensor checksums + a fixed-prompt log-prob probe); "
        "a mismatch stops the run with WeightSyncError.",
    )
    freshness_probe_tol: float | None = Field(
        default=None,
        gt=0.0,
        description="Mean |delta log p| per probe "
        "token allowed; None: from the engine's dtype (freshness.PROBE_TOL).",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra vLLM engine arguments "
        "(``LLM(...)``: e.g. max_num_seqs, max_num_batched_tokens, async_scheduling).",
    )

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        return v if v == "auto" else ENGINES.check(v)

    @field_validator("engine_args")
    @classmethod
    def _not_ours(cls, v: dict[str, Any]) -> dict[str, Any]:
        owned = {
            "model",
            "dtype",
            "seed",
            "gpu_memory_utilization",
            "max_model_len",
            "enable_sleep_mode",
            "logprobs_mode",
        }
        clash = sorted(owned & set(v))
        if clash:
            raise ValueError(
                f"{clash} are set from other keys (model.*, run.seed, rollout.*); remove them here"
            )
        return v


class OptimConfig(_Section):
    lr: float = Field(default=1e-6, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(default=1.0, gt=0.0)
    schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(default=0, ge=0)
    critic_lr: float = Field(default=1e-5, gt=0.0)


class GradingConfig(_Section):
    workers: int = Field(default=2, ge=1)
    backend: Literal["auto", "process", "ray"] = "auto"
    ray_address: str | None = None
    timeout_s: float = Field(default=10.0, gt=0.0)
    retries: int = Field(default=1, ge=0)
    cache: bool = True
    max_in_flight: int = Field(default=256, ge=1)
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="grader name -> grade options."
    )
    selftest: bool = Field(
        default=True,
        description="Run the golden cases of the graders this run uses before "
        "step 1 (`rrl graders selftest`); a disagreement stops the run.",
    )


class EvalConfig(_Section):
    every: int = Field(
        default=0, ge=0, description="Evaluate every k steps (0: only at the end when val is set)."
    )
    n: int = Field(default=1, ge=1, description="Samples per prompt (pass@k / maj@k use k = n).")
    temperature: float = Field(default=0.0, ge=0.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_prompts: int | None = Field(default=None, ge=1)
    at_start: bool = False


class TrainerConfig(_Section):
    steps: int = Field(default=100, ge=0)
    batch_size: int = Field(default=8, ge=1, description="Prompts per step (each sampled rollout.n times).")
    checkpoint_every: int = Field(default=0, ge=0, description="0: only the final checkpoint.")
    keep_checkpoints: int = Field(default=2, ge=1)
    resume: str = Field(
        default="never", description="'never', 'auto' (latest checkpoint in run dir), or a checkpoint path."
    )
    export: bool = True
    overwrite: bool = Field(
        default=False, description="Allow starting fresh in a run dir that already has checkpoints."
    )
    force_resume: bool = Field(
        default=False,
        description="Resume even though trajectory-defining keys (model, "
        "data, seed, rollout, algorithm, optimizer) changed since the checkpoint (`--force`).",
    )


class LoggingConfig(_Section):
    console: Literal["rich", "plain", "none"] = "rich"
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "reasoning-rl"
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
    engine_logs: bool = Field(
        default=False,
        description="Show the rollout engine's (vLLM's) own INFO/WARNING log "
        "lines and the libraries' progress bars; off: only their errors (`--verbose`).",
    )


class Config(_Section):
    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig
    data: DataConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)

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

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir.format(name=self.run.name))
