"""Generation: sampling parameters shared with evaluation, and the rollout section (engine, tools, hand-off)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reasoning_rl.config.base import _Section
from reasoning_rl.config.speculative import SpeculativeConfig
from reasoning_rl.registry import ENGINES, check_tool_name


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
        default=None,
        gt=0.0,
        le=1.0,
        description="vLLM's share of the device. None: on CUDA the memory plan sizes the engine (share, "
        "max_num_seqs, KV cache bytes; 0.5 for a model it cannot plan), 0.2 on CPU. Set: vLLM fills it with KV "
        "cache; the dry run refuses a share that leaves the trainer no room, naming the largest that fits.",
    )
    sleep: bool | None = Field(default=None, description="vLLM sleep mode while training; None: on for GPU.")
    engine_process: bool = Field(
        default=False,
        description="vLLM's engine core in a process of its own (vLLM's default; ours runs it in the trainer's "
        "process): its scheduling and sampling bookkeeping overlap our host work, and the weights travel per "
        "hand-off bucket through memory both processes map (CUDA IPC on the GPU). On one H100 at the anchor's "
        "shape: the decode alone 1.04x, the anchor 1.045x (bench/RESULTS.md, 2026-12-07 (5)). Synchronous steps "
        "only (rollout.max_lag=0: an output already queued between the processes at a swap would carry the wrong "
        "version); not with rollout.speculative or the hf engine.",
    )
    engine_cores: int = Field(
        default=1,
        ge=1,
        description="vLLM engine cores per rollout engine, each in a process of its own on the same device: at "
        "small models a decode step is bound by the host (~20 us per running request in the engine core, the GPU "
        "mostly idle), and two cores each stepping half the requests decoded 1.9x one in a probe under py-spy "
        "(bench/gpu/engine_mode.py mp2; not yet timed without it, nor in a run). Requests are dealt by prompt, so "
        "one prompt's samples share its prefix-cache blocks on one core; each core gets 1/N of "
        "rollout.gpu_memory_utilization and holds its own copy of the weights and CUDA context (the memory plan "
        "counts them). > 1 needs rollout.engine_process=true; not with model.lora.",
    )
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
    max_lag: int = Field(
        default=0,
        ge=0,
        description="Continuous rollouts (issue 31): the most policy versions a trained token may lag the "
        "trainer (the hard staleness cap: a group admitted at version a is trained by a + max_lag). 0: "
        "synchronous steps. > 0: at most trainer.batch_size x (1 + max_lag) groups are admitted and untrained, "
        "rollout.running_groups of them generating; each step trains the oldest finished ones, unfinished "
        "requests continue across the update with the new weights, and the loss is decoupled PPO "
        "(algorithms/decoupled.py). Any engine (vllm decodes requests across "
        "the update; hf generates a group whole, oldest first; one that only generates is stepped in whole "
        "requests) on one colocated rank or on split placement's rollout ranks, tool runs included (an "
        "unfinished tool trajectory at a swap restarts from its prompt with its seeds).",
    )
    running_groups: int | None = Field(
        default=None,
        ge=1,
        description="Continuous rollouts: groups kept generating in the engine (the running batch, by slots): "
        "another is admitted whenever one finishes, while rollout.max_lag's bound allows; at most "
        "trainer.batch_size x (1 + max_lag). None: trainer.batch_size, one batch resident; at max_lag 0 that is "
        "the synchronous step. How far admission runs ahead is separate from the staleness cap (as in AReaL and "
        "NeMo-RL), and verl, AReaL and slime keep a fixed number of requests in flight, admitted as slots free; "
        "admitting the whole bound at once made every admitted group finish together (issue 44: every other "
        "step generated two batches and the next none). More: more requests per engine step, and more lag.",
    )
    overlap: bool = Field(
        default=True,
        description="Split placement with rollout.max_lag > 0: the rollout ranks keep decoding during the "
        "update and the weight broadcast (new weights swapped in between two decode steps). false: they step "
        "only when the trainer asks (paused; deterministic, the single-process continuous run step for step).",
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
    speculative: SpeculativeConfig = Field(
        default_factory=SpeculativeConfig,
        description="Model-free speculative decoding in the vLLM engine (docs/speculative.md).",
    )
    tools: list[str] = Field(
        default_factory=list,
        description="Tools the model may call (names of the tool registry: python, calculator, a "
        "plugin's, or module:attr of a @tool function / Tool in an importable module; `rrl tools list`); "
        "non-empty turns on multi-turn rollouts, where max_tokens is the whole response budget "
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
        return [check_tool_name(name) for name in v]

    @model_validator(mode="after")
    def _engine_process_fits(self) -> RolloutConfig:
        clash = (
            f"rollout.max_lag={self.max_lag} (a swap's version would miss outputs queued between the processes)"
            if self.max_lag > 0
            else "rollout.speculative (its draft counts come from the in-process scheduler)"
            if self.speculative.on
            else "rollout.engine=hf (it has no engine core)"
            if self.engine == "hf"
            else None
        )
        if self.engine_process and clash is not None:
            raise ValueError(f"rollout.engine_process=true cannot be used with {clash}; set one of them back")
        if self.engine_cores > 1 and not self.engine_process:
            raise ValueError(
                f"rollout.engine_cores={self.engine_cores} needs rollout.engine_process=true (each core is an engine "
                "process); set rollout.engine_process=true or rollout.engine_cores=1"
            )
        return self

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
            "speculative_config",
        }
        clash = sorted(owned & set(v))
        if clash:
            raise ValueError(
                f"{clash} are set from other keys (model.*, run.seed, rollout.*); remove them here"
            )
        return v
