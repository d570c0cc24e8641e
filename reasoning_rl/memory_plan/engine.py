"""A vLLM rollout engine's memory on one device: weights, its own working set and the KV cache, sized to what a
step asks of it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from reasoning_rl.config import Config, ConfigError
from reasoning_rl.memory_plan.shapes import DTYPE_BYTES, GiB, ModelShape

ENGINE_ASLEEP = 1 * GiB  # what a sleeping vLLM keeps (CUDA graph pools, persistent buffers)
ENGINE_FIXED = 2 * GiB  # vLLM beside weights and KV cache: CUDA graphs, sampler, non-torch memory
ENGINE_BATCHED_TOKENS = 16384  # vLLM's max_num_batched_tokens on large GPUs (its profile run's width)
KV_BLOCK = 16  # vLLM allocates the KV cache in blocks of this many tokens
SHARE_STEP = 1000  # a planned gpu_memory_utilization is rounded up to 1 / SHARE_STEP of the device


@dataclass(frozen=True)
class EnginePlan:
    """One rollout engine on one device: weights, vLLM's own working set, KV cache for ``max_num_seqs``
    sequences of ``max_model_len`` tokens (``wanted_seqs``: what one step asks of it at once). ``cores``
    (``rollout.engine_cores``): engine cores in processes of their own, each with its own copy of the weights and
    its own working set (``weights`` and ``overhead`` are one core's); the KV cache is theirs together."""

    weights: int
    overhead: int
    kv_per_token: int
    max_model_len: int
    max_num_seqs: int
    wanted_seqs: int
    share: float | None = None  # rollout.gpu_memory_utilization when the config fixes it
    cores: int = 1

    @property
    def kv(self) -> int:
        return self.max_num_seqs * _blocks(self.max_model_len) * self.kv_per_token

    @property
    def total(self) -> int:
        return self.cores * (self.weights + self.overhead) + self.kv

    def utilization(self, capacity: int) -> float:
        """vLLM's gpu_memory_utilization (its share of the device): the config's, or this plan's rounded up to
        1 / ``SHARE_STEP``. vLLM takes that share whatever its KV cache needs."""
        if self.share is not None:
            return self.share
        return min(1.0, math.ceil(self.total / capacity * SHARE_STEP) / SHARE_STEP)

    def held(self, capacity: int) -> int:
        """Bytes the awake engine holds on its device: its whole share (the KV cache fills what its weights and
        working set leave), during generation, the hand-off, and the update when it does not sleep."""
        return int(self.utilization(capacity) * capacity)

    @property
    def least(self) -> int:
        """The smallest engine that runs: weights, working set and one sequence's KV cache."""
        return self.cores * (self.weights + self.overhead) + _blocks(self.max_model_len) * self.kv_per_token


def _blocks(tokens: int) -> int:
    return math.ceil(tokens / KV_BLOCK) * KV_BLOCK


def handoff_bytes(shape: ModelShape, bucket_bytes: int, b: int, gathered_b: int, copies: int = 1) -> int:
    """The weight hand-off's transient on a training rank (``rollout.handoff_bucket_mb``): one bucket of full
    tensors in the engine's dtype (``b`` bytes; a bucket holds at least the largest tensor, never a part of
    one) and that tensor as FSDP2 gathers it (``gathered_b``: the master dtype) before its cast. ``copies``: 2
    when the bucket is also copied into a buffer an engine process maps (``rollout.engine_process``)."""
    largest = max(shape.vocab, shape.intermediate) * shape.hidden
    return copies * max(bucket_bytes, b * largest) + gathered_b * largest


def engine_overhead(shape: ModelShape, b: int, max_num_seqs: int, batched_tokens: int, tp: int) -> int:
    """vLLM beside weights and KV: its profile run's activations over ``batched_tokens``, the sampler's fp32
    logits and probabilities for every sequence, and ``ENGINE_FIXED`` (CUDA graphs, non-torch memory)."""
    h, i = shape.hidden, shape.intermediate
    act = batched_tokens * b * (4 * h + shape.q_dim + 2 * shape.kv_dim + 3 * i) // tp
    return ENGINE_FIXED + act + 8 * shape.vocab * max_num_seqs


def plan_engine(
    shape: ModelShape,
    cfg: Config,
    *,
    dtype: str,
    available: int,
    max_model_len: int,
    wanted_seqs: int,
) -> EnginePlan:
    """Size one engine to what a step asks of it, within ``available`` bytes of its device: KV cache for
    ``wanted_seqs`` sequences of ``max_model_len`` tokens (``rollout.engine_args.max_num_seqs`` when set), or
    for as many as fit. Raises ``ConfigError`` (one line, with the fix) when not even one sequence fits."""
    b = DTYPE_BYTES[dtype]
    tp = cfg.rollout.tensor_parallel_size
    args = cfg.rollout.engine_args
    seqs = int(args.get("max_num_seqs", wanted_seqs))
    batched = int(args.get("max_num_batched_tokens", ENGINE_BATCHED_TOKENS))
    kv_token = shape.kv_bytes_per_token(b) // tp
    weights = shape.params * b // tp
    per_seq = _blocks(max_model_len) * kv_token
    cores = cfg.rollout.engine_cores  # each holds the weights and a working set of its own
    room = available - cores * (weights + engine_overhead(shape, b, seqs, batched, tp))
    if room < per_seq:
        fit = max(room, 0) // kv_token // KV_BLOCK * KV_BLOCK
        prompt = max_model_len - cfg.rollout.max_tokens
        fix = (
            f"lower rollout.max_tokens to <= {fit - prompt}"
            if fit > prompt
            else "free device memory for the engine (model.cpu_offload=true moves the optimizer state to the host)"
        )
        raise ConfigError(
            f"rollout.max_tokens={cfg.rollout.max_tokens}: one {max_model_len}-token sequence needs "
            f"{per_seq / GiB:.1f} GiB of KV cache, the engine has {max(room, 0) / GiB:.1f} GiB left on this device "
            f"after its weights ({weights / GiB:.1f} GiB{f' in each of {cores} cores' if cores > 1 else ''}) and "
            f"the trainer: {fix}"
        )
    seqs = min(seqs, room // per_seq) if "max_num_seqs" not in args else seqs
    return EnginePlan(
        weights=weights,
        overhead=engine_overhead(shape, b, seqs, batched, tp),
        kv_per_token=kv_token,
        max_model_len=max_model_len,
        max_num_seqs=seqs,
        wanted_seqs=wanted_seqs,
        share=cfg.rollout.gpu_memory_utilization,
        cores=cores,
    )
