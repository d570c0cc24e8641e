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
from reasoning_rl.registry import ENGINES, TOOLS


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


class ModelConfig(_Section):
    path: str = Field(
        description="Local HF model dir, hub name, or a dir holding a GGUF file (see gguf_file)."
    )
    gguf_file: str | None = Field(
        default=None,
        description="A GGUF file inside model.path to load (converted once to an HF dir under .cache/converted/).",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description="Weights and compute dtype of the trained models; auto: bfloat16 on CUDA, float32 on CPU.",
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass: less memory, a slower update."
    )
    ref_offload: bool = Field(default=False, description="Keep the frozen reference policy on CPU.")
    fsdp: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Wrap the trained models with FSDP2; auto: on with several ranks or on CUDA.",
    )
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

    path: str | None = Field(
        default=None,
        description="JSONL(.gz) or parquet file, HF dataset dir, or hub dataset name (set this or generator).",
    )
    split: str = Field(default="train", description="Split to read from a dataset dir or hub dataset.")
    generator: Literal["arithmetic", "fixed_digit"] | None = Field(
        default=None, description="A built-in seeded task generator instead of a path (seeded by run.seed)."
    )
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
    system_prompt: str | None = Field(
        default=None,
        description="System message put before each prompt that has none; None: no system message.",
    )
    grader_map: dict[str, str] = Field(
        default_factory=dict,
        description="data_source or ability -> grader name (explicit row 'grader' wins).",
    )
    default_grader: str = Field(
        default="math",
        description="Grader of rows that neither name one nor match grader_map: a registered name or module:Class.",
    )


class DataConfig(RowConfig):
    train: list[SourceConfig] = Field(
        min_length=1, description="Training sources (a single mapping or path is a one-source list)."
    )
    val: list[SourceConfig] = Field(
        default_factory=list,
        description="Held-out sources for evaluation (eval.*); empty: no evaluation in training.",
    )
    chat_template: bool | str = Field(
        default=True,
        description="true: wrap prompts with the tokenizer's chat "
        "template; false: plain text; a string: this Jinja chat template instead, "
        "inline (contains '{%' or '{{') or a file path (relative to the working "
        "directory).",
    )
    on_bad_row: Literal["error", "skip"] = Field(
        default="error",
        description="A malformed or too-long row: 'error' stops naming file and row; 'skip' drops it and counts it.",
    )
    max_prompt_tokens: int = Field(
        default=1024, ge=1, description="Longest prompt, in tokens, after templating."
    )
    shuffle: bool = Field(
        default=True, description="Shuffle the prompt order every epoch (seeded by run.seed)."
    )

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
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature; 0: greedy.")
    top_p: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Nucleus sampling: keep the top tokens up to this mass."
    )
    max_tokens: int = Field(default=256, ge=1, description="Most response tokens per sample.")
    stop: list[str] = Field(default_factory=list, description="Strings that end a response (kept out of it).")
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
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs per vLLM engine (tensor parallel). > 1 needs rollout.engine=vllm, CUDA, "
        "resources.placement=split (each rollout rank gets that many GPUs) and ranks_per_node divisible by it.",
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
    tools: list[str] = Field(
        default_factory=list,
        description="Tools the model may call (names of the tool registry: python, calculator, or a "
        "plugin's); non-empty turns on multi-turn rollouts, where max_tokens is the whole response budget "
        "(model + tool tokens).",
    )
    tool_format: Literal["fenced", "hermes"] = Field(
        default="fenced",
        description="How calls are written: fenced ```python blocks (output comes back as an ```output "
        "block) or the chat template's <tool_call> JSON (Qwen/Hermes; output as a tool message).",
    )
    max_turns: int = Field(default=4, ge=0, description="Tool calls per trajectory (tools only).")
    turn_max_tokens: int | None = Field(
        default=None, ge=1, description="Tokens per generation call between tool calls; None: max_tokens."
    )
    tool_timeout_s: float = Field(default=10.0, gt=0.0, description="Time budget of one tool call.")
    tool_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-tool constructor options, e.g. {python: {sandbox: docker, pool_size: 4}}.",
    )

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        return v if v == "auto" else ENGINES.check(v)

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"tools are listed more than once: {v}")
        return [TOOLS.check(name) for name in v]

    @model_validator(mode="after")
    def _tool_options_for_listed_tools(self) -> RolloutConfig:
        stray = sorted(set(self.tool_options) - set(self.tools))
        if stray:
            raise ValueError(f"tool_options for {stray}, which are not in rollout.tools {self.tools}")
        if self.tools and self.tool_format == "fenced" and "python" not in self.tools:
            raise ValueError("tool_format 'fenced' calls the python tool: add python to rollout.tools")
        return self

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
    lr: float = Field(default=1e-6, gt=0.0, description="AdamW learning rate of the policy.")
    weight_decay: float = Field(default=0.0, ge=0.0, description="AdamW weight decay.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW betas (beta1, beta2).")
    grad_clip: float | None = Field(
        default=1.0, gt=0.0, description="Clip the gradient's global norm to this; None: no clipping."
    )
    schedule: Literal["constant", "cosine"] = Field(
        default="constant",
        description="Learning-rate schedule after warmup; cosine decays over trainer.steps.",
    )
    warmup_steps: int = Field(default=0, ge=0, description="Optimizer steps of linear learning-rate warmup.")
    critic_lr: float = Field(
        default=1e-5, gt=0.0, description="AdamW learning rate of the critic (algorithm.name=ppo)."
    )


class RewardTermConfig(_Section):
    """One component of a composed reward (``grading.rewards``)."""

    grader: str | None = Field(
        default=None,
        description="Grader name or module:Class; omitted: the row's own grader (data.grader_map / "
        "data_source default / data.default_grader).",
    )
    weight: float = Field(default=1.0, allow_inf_nan=False, description="Its score's weight in the reward.")
    name: str | None = Field(
        default=None,
        description="Metric name (reward/<name>/mean); default: the grader's name, 'answer' when omitted.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Grade options over grading.options of its grader."
    )

    @property
    def label(self) -> str:
        return self.name or self.grader or "answer"


def _unique_labels(terms: list[RewardTermConfig], where: str) -> list[RewardTermConfig]:
    labels = [t.label for t in terms]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"{where}: component name(s) {twice} appear twice; give each a distinct `name`")
    return terms


class GradingConfig(_Section):
    workers: int = Field(default=2, ge=1, description="Grading worker processes (or Ray actors).")
    backend: Literal["auto", "process", "ray"] = Field(
        default="auto",
        description="Where graders run; auto: Ray when ray_address or RAY_ADDRESS is set or Ray is running, else local processes.",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster for the grading workers (backend ray/auto)."
    )
    timeout_s: float = Field(
        default=10.0, gt=0.0, description="Hard budget per grade; a grade killed at it is an error (masked)."
    )
    retries: int = Field(
        default=1,
        ge=0,
        description="Extra attempts after a worker failure (crash, bad result); timeouts are not retried.",
    )
    cache: bool = Field(
        default=True,
        description="Cache grades in run_dir/grades.sqlite, keyed by grader source, response and truth.",
    )
    max_in_flight: int = Field(
        default=256, ge=1, description="Most streamed samples queued or being graded at once (back-pressure)."
    )
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="grader name -> grade options."
    )
    selftest: bool = Field(
        default=True,
        description="Run the golden cases of the graders this run uses before "
        "step 1 (`rrl graders selftest`); a disagreement stops the run.",
    )
    rewards: list[RewardTermConfig] = Field(
        default_factory=list,
        description="Composed reward for every row: [{grader, weight, options, name}, ...], reward = "
        "sum of weight x score, an error in any component masks the sample; the first component is the "
        "verdict accuracy/pass@k count. Empty: the row's grader alone (docs/rewards.md).",
    )
    source_rewards: dict[str, list[RewardTermConfig]] = Field(
        default_factory=dict,
        description="data_source -> its own composed reward (replaces grading.rewards for those rows).",
    )

    @field_validator("rewards")
    @classmethod
    def _rewards_unique(cls, v: list[RewardTermConfig]) -> list[RewardTermConfig]:
        return _unique_labels(v, "grading.rewards")

    @field_validator("source_rewards")
    @classmethod
    def _source_rewards_unique(
        cls, v: dict[str, list[RewardTermConfig]]
    ) -> dict[str, list[RewardTermConfig]]:
        for source, terms in v.items():
            if not terms:
                raise ValueError(f"grading.source_rewards.{source}: give at least one component")
            _unique_labels(terms, f"grading.source_rewards.{source}")
        return v


class EvalConfig(_Section):
    every: int = Field(
        default=0, ge=0, description="Evaluate every k steps (0: only at the end when val is set)."
    )
    n: int = Field(default=1, ge=1, description="Samples per prompt (pass@k / maj@k use k = n).")
    temperature: float = Field(
        default=0.0, ge=0.0, description="Sampling temperature for evaluation; 0: greedy."
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


class TrainerConfig(_Section):
    steps: int = Field(
        default=100, ge=0, description="Training steps (one batch of prompts, one policy update each)."
    )
    batch_size: int = Field(default=8, ge=1, description="Prompts per step (each sampled rollout.n times).")
    checkpoint_every: int = Field(default=0, ge=0, description="0: only the final checkpoint.")
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
    engine_logs: bool = Field(
        default=False,
        description="Show the rollout engine's (vLLM's) own INFO/WARNING log "
        "lines and the libraries' progress bars; off: only their errors (`--verbose`).",
    )


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
