"""Model and engine construction from the config: one rank's ``Models`` (policy, reference, critic) and its
rollout engine, plus the device / model-dir / length decisions both need.

It sits below both the trainer (the driver resolves device, dtype and lengths into a ``WorkerSpec``) and the
distributed workers (each rank builds its models and engine from that spec), so neither imports the other
to build.

Public names: ``Models``, ``build_models``, ``sharding_of``, ``engine_for``, ``check_speculative``, ``rollout_kind``,
``device_defaults``, ``model_max_len``, ``resolve_device``, ``resolve_model_dir``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from reasoning_rl import dist
from reasoning_rl.config import Config, ConfigError
from reasoning_rl.memory_plan.plan import CPU_MICRO_BATCH_TOKENS, MemoryPlan, plan_run
from reasoning_rl.memory_plan.shapes import ModelShape, PlanUnavailable
from reasoning_rl.rollout import RolloutEngine, make_engine

if TYPE_CHECKING:
    from reasoning_rl.data import Prompt
    from reasoning_rl.policy.comm import Sharding


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


@dataclass(frozen=True)
class Models:
    """The trained policy, the frozen reference (when a KL term is on) and the critic (PPO)."""

    policy: Any
    ref: Any = None
    critic: Any = None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device=cuda but no CUDA device is visible; use run.device=auto or cpu")
    return device


def resolve_model_dir(cfg: Config) -> Path:
    """A local HF model dir for both trainer and vLLM; a GGUF checkpoint is converted once and cached."""
    from reasoning_rl.policy.model import convert_gguf

    if cfg.model.gguf_file is None:
        return Path(cfg.model.path)
    stem = Path(cfg.model.gguf_file).stem.lower().replace(".", "-")
    return convert_gguf(cfg.model.path, cfg.model.gguf_file, Path(".cache") / "converted" / stem)


def build_models(
    cfg: Config, model_dir: Path, device: str, dtype: str, max_model_len: int | None = None
) -> Models:
    """One rank's policy, reference (when a KL term is on) and critic (PPO), from ``model.*`` / ``optim.*``
    (sharded with FSDP2 over the process group when there is one). The micro-batch budget is
    ``algorithm.micro_batch_tokens`` or the memory plan's for sequences of ``max_model_len`` tokens
    (``micro_batch_budget``)."""
    from reasoning_rl.policy import Policy
    from reasoning_rl.policy.comm import Sharding

    longest = max_model_len or cfg.data.max_prompt_tokens + cfg.rollout.max_tokens
    budget = micro_batch_budget(cfg, model_dir, device, dtype, longest)
    o = cfg.optim
    compiled, _ = device_defaults(cfg, device)
    fsdp = {"auto": None, "on": True, "off": False}[cfg.model.fsdp]
    trainable: dict[str, Any] = dict(  # what the policy and the critic share; each brings its own lr
        dtype=dtype,
        device=device,
        fsdp=fsdp,
        weight_decay=o.weight_decay,
        betas=o.betas,
        grad_clip=o.grad_clip,
        warmup_steps=o.warmup_steps,
        total_steps=cfg.trainer.steps if o.schedule == "cosine" else None,
        activation_checkpointing=cfg.model.gradient_checkpointing,
        checkpoint_every=cfg.model.gradient_checkpointing_every,
        activation_offload=cfg.model.activation_offload,
        fused_optimizer=fused_adamw(cfg, device),
        compile_layers=compiled,
        micro_batch_tokens=budget,
        packing=cfg.algorithm.packing,
        sharding=sharding_of(cfg),
    )
    lora = cfg.model.lora if cfg.model.lora.enabled else None
    policy = Policy.from_pretrained(str(model_dir), lr=o.lr, lora=lora, seed=cfg.run.seed, **trainable)
    if not policy.fsdp and trainable["sharding"] != Sharding():
        raise ConfigError(
            "model.cpu_offload / reduce_dtype / reshard_after_forward / forward_prefetch are FSDP2 switches, "
            "but this run trains without FSDP2: set model.fsdp=on (or train on more than one rank)"
        )
    ref: Any = None
    if cfg.algorithm.kl_coef > 0 and lora is not None:
        from reasoning_rl.policy import AdapterOffReference

        ref = AdapterOffReference(policy)  # the base model itself: no second copy
    elif cfg.algorithm.kl_coef > 0:
        from reasoning_rl.policy import ReferencePolicy

        ref = ReferencePolicy.from_pretrained(
            str(model_dir),
            dtype=dtype,
            device=device,
            fsdp=fsdp,
            offload=cfg.model.ref_offload,
            micro_batch_tokens=budget,
            packing=cfg.algorithm.packing,
        )
    critic = None
    if cfg.algorithm.name == "ppo":
        from reasoning_rl.policy import Critic

        critic = Critic.from_pretrained(str(model_dir), lr=o.critic_lr, **trainable)
    return Models(policy, ref, critic)


def memory_plan(
    cfg: Config, model_dir: Path, device: str, dtype: str, max_model_len: int, world: int | None = None
) -> MemoryPlan | None:
    """This rank's memory plan on its device (``reasoning_rl.memory_plan``; ``world``: the training ranks,
    default the process group's); None for a model it cannot plan."""
    try:
        return plan_config(cfg, model_dir, device, dtype, max_model_len, world)
    except PlanUnavailable:
        return None


def plan_config(
    cfg: Config, model_dir: Path, device: str, dtype: str, max_model_len: int, world: int | None = None
) -> MemoryPlan:
    """``memory_plan``, raising ``PlanUnavailable`` (with why) for a model it cannot plan."""
    return plan_run(
        cfg,
        ModelShape.from_model_dir(model_dir),
        device=device,
        dtype=dtype,
        capacity=device_capacity(device),
        world=world or dist.world_size(),
        max_model_len=max_model_len,
        engine=rollout_kind(cfg) == "vllm",
        host_capacity=device_capacity("cpu"),
    )


def run_dtype(cfg: Config, device: str) -> str:
    """``model.dtype`` with auto resolved: bfloat16 on CUDA, float32 on CPU."""
    return cfg.model.dtype if cfg.model.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")


def micro_batch_budget(cfg: Config, model_dir: Path, device: str, dtype: str, max_model_len: int) -> int:
    """The update's micro-batch token budget: ``algorithm.micro_batch_tokens``, or the largest the memory plan
    allows for this device (never below one ``max_model_len`` sequence; ``CPU_MICRO_BATCH_TOKENS`` on CPU)."""
    if cfg.algorithm.micro_batch_tokens is not None:
        return cfg.algorithm.micro_batch_tokens
    plan = memory_plan(cfg, model_dir, device, dtype, max_model_len) if device == "cuda" else None
    if plan is None:
        return max(CPU_MICRO_BATCH_TOKENS, max_model_len)
    return plan.micro_batch_tokens


def device_capacity(device: str) -> int:
    """Bytes of memory of this rank's device: the GPU's, or the host's physical memory on CPU."""
    if device == "cuda":
        return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    import os

    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def sharding_of(cfg: Config) -> Sharding:
    """The FSDP2 memory / communication switches of ``model.*``."""
    from reasoning_rl.policy.comm import Sharding

    m = cfg.model
    return Sharding(
        cpu_offload=m.cpu_offload,
        reduce_dtype={"float32": torch.float32, "bfloat16": torch.bfloat16}[m.reduce_dtype],
        reshard_after_forward=m.reshard_after_forward,
        forward_prefetch=m.forward_prefetch,
    )


def engine_for(
    cfg: Config, model_dir: Path, device: str, max_model_len: int, *, dtype: str, sleep: bool | None = None
) -> RolloutEngine:
    """The rollout engine of ``cfg.rollout`` with room for ``max_model_len`` tokens (one per rank in a run;
    ``sleep`` defaults to ``rollout.sleep``). vLLM on CUDA gets the memory plan's share, max_num_seqs and KV
    cache bytes (``kv_cache_memory_bytes``: the KV the plan sized, not what the share leaves after vLLM's own
    profile); ``rollout.gpu_memory_utilization`` (then vLLM sizes its KV cache to fill it) and
    ``engine_args`` win when set."""
    r = cfg.rollout
    kind = rollout_kind(cfg)
    check_speculative(cfg, kind)
    extra = dict(r.engine_args) if kind == "vllm" else {}
    if r.speculative.on:
        extra["speculative"] = r.speculative
    if r.engine_process:
        if kind != "vllm":
            raise ConfigError(f"rollout.engine_process=true needs the vllm engine; this run's is {kind}")
        extra.update(engine_process=True, handoff_bucket_bytes=r.handoff_bucket_mb << 20)
        if r.engine_cores > 1:  # the plan's share and KV bytes are the cores' together; each gets 1/N
            extra["engine_cores"] = r.engine_cores
    if r.tensor_parallel_size > 1:  # launch.check_tensor_parallel refused it anywhere but vLLM on CUDA
        extra["tensor_parallel_size"] = r.tensor_parallel_size
    if kind == "vllm" and os.environ.get("TQDM_DISABLE") == "1":  # no bars: output redirected, or the user's
        # vLLM gives its weight-loading bar an explicit ``disable=``, which tqdm's environment default does not
        # override: "Loading safetensors checkpoint shards" bars reached redirected logs
        extra.setdefault("use_tqdm_on_load", False)
    share = r.gpu_memory_utilization or (0.5 if device == "cuda" else 0.2)
    on_gpu = kind == "vllm" and device == "cuda"
    plan = memory_plan(cfg, model_dir, device, dtype, max_model_len) if on_gpu else None
    if plan is not None:  # KV cache and concurrency sized to what a step asks
        if plan.engine is None:
            raise ConfigError(plan.problem or "the memory plan could not size the engine")
        share = plan.engine.utilization(plan.capacity)
        extra.setdefault("max_num_seqs", plan.engine.max_num_seqs)
        if r.gpu_memory_utilization is None:
            extra.setdefault("kv_cache_memory_bytes", plan.engine.kv)
    if kind == "vllm" and cfg.model.lora.enabled and cfg.resources.placement == "split":
        # split placement sends only the adapters: vLLM serves them with its LoRA kernels (colocated engines
        # get merged weights and need none); its max_lora_rank takes one of a few sizes
        rank = cfg.model.lora.rank
        extra.update(
            enable_lora=True, max_loras=1, max_lora_rank=min(s for s in VLLM_LORA_RANKS if s >= rank)
        )
    try:
        return make_engine(
            kind,
            str(model_dir),
            dtype=dtype,
            seed=cfg.run.seed,
            gpu_memory_utilization=share,
            max_model_len=max_model_len,
            enable_sleep_mode=r.sleep if sleep is None else sleep,
            **extra,
        )
    except TypeError as e:  # vLLM names the unknown argument; only the user's own keys are named back
        if kind != "vllm" or not r.engine_args:
            raise
        raise ConfigError(f"rollout.engine_args {sorted(r.engine_args)}: vLLM rejected them ({e})") from e


def check_speculative(cfg: Config, kind: str) -> None:
    """Refuse, in one line, a ``rollout.speculative`` this install cannot run exactly (docs/speculative.md)."""
    r, spec = cfg.rollout, cfg.rollout.speculative
    if not spec.on:
        return
    where = f"rollout.speculative.method={spec.method}"
    if kind != "vllm":
        raise ConfigError(
            f"{where} needs rollout.engine=vllm (the {kind} engine has no speculative decoding)"
        )
    import importlib.util

    if spec.method == "suffix" and importlib.util.find_spec("arctic_inference") is None:
        raise ConfigError(f"{where} needs the arctic-inference package, which is not installed; use ngram")
    if spec.method == "group" and r.max_lag > 0:
        raise ConfigError(
            f"{where}: group drafts are recorded from streamed rollouts and continuous ones (rollout.max_lag > 0) "
            "record none; use ngram"
        )
    if spec.method == "group" and r.tensor_parallel_size > 1:
        raise ConfigError(f"{where} needs the in-process engine of tensor_parallel_size=1; use ngram")


def fused_adamw(cfg: Config, device: str) -> bool:
    """``optim.fused`` with None resolved: the fused AdamW on CUDA (no optimizer-step temporaries), unless
    ``model.cpu_offload`` runs the step on the host."""
    if cfg.optim.fused is not None:
        return cfg.optim.fused
    return device == "cuda" and not cfg.model.cpu_offload


def device_defaults(cfg: Config, device: str) -> tuple[bool, bool]:
    """(model.compile, rollout.seed_per_sample) with None resolved for ``device``: compiled and one sampling
    stream on CUDA (speed), eager and per-sample seeds on CPU (no compile wait, exact reproducibility)."""
    compiled = cfg.model.compile if cfg.model.compile is not None else device == "cuda"
    seeded = cfg.rollout.seed_per_sample if cfg.rollout.seed_per_sample is not None else device != "cuda"
    return compiled, seeded


def model_max_len(model_dir: Path, prompts: list[Prompt], max_tokens: int) -> int:
    """Longest prompt + response budget, so the engine reserves no more than the run needs."""
    import json

    need = max((len(p.token_ids) for p in prompts), default=1) + max_tokens
    conf = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    limit = conf.get("max_position_embeddings")
    if limit is not None and need > int(limit):
        raise ConfigError(
            f"longest prompt + rollout.max_tokens = {need} tokens exceeds the model's "
            f"max_position_embeddings={limit}; lower rollout.max_tokens or data.max_prompt_tokens"
        )
    return need


def rollout_kind(cfg: Config) -> str:
    """``rollout.engine=auto``: vLLM when importable, else the plain transformers engine."""
    import importlib.util

    if cfg.rollout.engine != "auto":
        return cfg.rollout.engine
    return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
