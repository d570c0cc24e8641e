"""The memory plan: the peak device memory of each phase of a run (update, log-prob passes, rollout engine),
predicted from the model's shape and the config before anything is loaded, and the largest micro-batch token
budget that fits.

Why: a run that fits step 1 must fit step 100. AdamW's fp32 state first appears at step 1's optimizer step, the
engine's KV cache is sized once at start-up, and activations grow with the micro-batch; none of it showed before
an OOM in step 2 (issue 36). So the optimizer state is counted from the start, and the plan names the switch or
the budget that makes a run fit, in one line.

Per rank, in bytes (P parameters, W ranks sharing the FSDP2 group, b compute bytes, m master bytes: fp32 under
FSDP2 on CUDA, else b):

- kept: params m·P/W, gradients m·P/W, AdamW moments 2·m·P/W (all on CPU with ``model.cpu_offload``), the frozen
  reference b·P/W (``kl_coef > 0``; on CPU with ``model.ref_offload``), the critic like the policy (PPO);
- with LoRA adapters (``model.lora``, A adapter parameters from rank, target modules and shape: ``Adapters``) the
  policy keeps its frozen base in b (b·P/W) and only the fp32 adapters have gradients and AdamW moments
  (4·A/W + 4·A/W + 8·A/W); the reference is the base with the adapters off (no second model); a layer's saved
  activations grow by each adapted linear's low-rank input (``Adapters.saved_bytes``);
- gathered by FSDP2 while a micro-batch runs: the root (embeddings, head) and two decoder layers in b (every
  layer with ``reshard_after_forward=false``), a layer's unsharded gradients in b and the reduce dtype;
- saved activations per token of one decoder layer (``layer_saved_bytes``: what autograd keeps for backward in
  the HF Llama/Qwen2/Qwen3 decoder layer; counted tensor by tensor on CPU, tests/rl/test_memory_plan.py), a
  checkpointed layer keeps only its input (b·h); ``model.activation_offload`` moves them all to host memory;
- the log-prob head's transient: one chunk of ``chunk_tokens`` x vocab logits in b and fp32;
- the engine: weights (engine dtype), KV cache 2·layers·kv_heads·head_dim·b per token for max_num_seqs
  sequences of max_model_len tokens, and vLLM's own working set (``engine_overhead``).

This module reads ``config.json`` as JSON and imports no torch: ``rrl doctor`` and ``rrl train --dry-run`` plan
a run without loading anything. Dense decoders only (llama, qwen2, qwen3, mistral families).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reasoning_rl.config import Config, ConfigError, LoraConfig

GiB = 1 << 30
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HOST_SHARE = 0.85  # of the host's memory the pinned offloaded states may take (the run needs the rest)
USABLE_SHARE = 0.92  # of the device's memory: the caching allocator's fragmentation and reserve
DEVICE_RESERVE = 1 * GiB  # CUDA context, cuBLAS / NCCL workspaces: memory outside torch's allocator
ENGINE_ASLEEP = 1 * GiB  # what a sleeping vLLM keeps (CUDA graph pools, persistent buffers)
ENGINE_FIXED = 2 * GiB  # vLLM beside weights and KV cache: CUDA graphs, sampler, non-torch memory
ENGINE_BATCHED_TOKENS = 16384  # vLLM's max_num_batched_tokens on large GPUs (its profile run's width)
KV_BLOCK = 16  # vLLM allocates the KV cache in blocks of this many tokens
BUDGET_STEP = 256  # planned micro-batch budgets are multiples of this
CPU_MICRO_BATCH_TOKENS = 8192  # algorithm.micro_batch_tokens=None on CPU: the former fixed default
LOSS_BYTES_PER_TOKEN = 96  # fp32 per-token tensors of the loss (ratio, clipped terms, masks, ...)


class PlanUnavailable(ValueError):
    """The plan cannot be made for this model (no config.json, or not a dense decoder); says why."""


@dataclass(frozen=True)
class ModelShape:
    """The sizes that decide memory, from an HF ``config.json`` (or a transformers config's ``to_dict()``)."""

    model_type: str
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> ModelShape:
        kind = str(conf.get("model_type", ""))
        if kind not in DENSE_TYPES:
            raise PlanUnavailable(
                f"model_type {kind!r} (the plan knows dense {', '.join(DENSE_TYPES)} decoders)"
            )
        heads = int(conf["num_attention_heads"])
        hidden = int(conf["hidden_size"])
        bias = conf.get("attention_bias")
        return cls(
            model_type=kind,
            vocab=int(conf["vocab_size"]),
            hidden=hidden,
            intermediate=int(conf["intermediate_size"]),
            layers=int(conf["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(conf.get("num_key_value_heads") or heads),
            head_dim=int(conf.get("head_dim") or hidden // heads),
            tied=bool(conf.get("tie_word_embeddings", False)),
            qkv_bias=bool(bias) if bias is not None else kind == "qwen2",  # Qwen2's q/k/v always have a bias
            o_bias=bool(bias) and kind != "qwen2",
            mlp_bias=bool(conf.get("mlp_bias") or False),
            qk_norm=kind == "qwen3",
        )

    @classmethod
    def from_model_dir(cls, model_dir: str | Path) -> ModelShape:
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise PlanUnavailable(f"no config.json in {model_dir} (a hub id is planned once downloaded)")
        return cls.from_config(json.loads(path.read_text(encoding="utf-8")))

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        attn = h * (q + 2 * kv) + q * h + (q + 2 * kv) * self.qkv_bias + h * self.o_bias
        mlp = 3 * h * i + (2 * i + h) * self.mlp_bias
        norms = 2 * h + 2 * self.head_dim * self.qk_norm
        return attn + mlp + norms

    @property
    def root_params(self) -> int:
        """Embeddings, the LM head when not tied, the final norm: FSDP2's root unit."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params

    def linears(self) -> dict[str, tuple[int, int]]:
        """A decoder layer's linear layers under their HF module names (as PEFT matches LoRA targets), with
        their (in, out) features."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        return {
            "self_attn.q_proj": (h, q),
            "self_attn.k_proj": (h, kv),
            "self_attn.v_proj": (h, kv),
            "self_attn.o_proj": (q, h),
            "mlp.gate_proj": (h, i),
            "mlp.up_proj": (h, i),
            "mlp.down_proj": (i, h),
        }

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def layer_saved_bytes(self, b: int, compiled: bool) -> int:
        """Bytes per token autograd saves in one decoder layer (b: compute dtype bytes).

        Eager: each RMSNorm keeps its fp32 input, rsqrt, normalized and scaled outputs; attention keeps the
        rotated q, k, v, output and log-sum-exp; the MLP keeps gate, SiLU, up and their product. Compiled
        (``model.compile``, AOTAutograd's partitioner): the norms keep input, rsqrt and output, the MLP gate, up
        and one product; measured on CPU with inductor for the Qwen2-1.5B shape (73,272 bytes/token/layer,
        which also matches the ~16 GiB per 8.4k-token sequence seen on the H200 in issue 36)."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim, self.kv_dim
        attn = b * (2 * q + 2 * kv) + 4 * self.heads
        norms = 4 * b * h + 8 if compiled else 2 * (4 * h + 4 + 2 * b * h)
        out = norms + attn + (3 if compiled else 4) * b * i
        if self.qk_norm:  # Qwen3's per-head q/k norms
            out += (b if compiled else 4 + b) * (q + kv) + 4 * (self.heads + self.kv_heads)
        return out

    def model_saved_bytes(self, b: int) -> int:
        """Per-token saved bytes outside the decoder layers: ids, rotary cos/sin, the final norm (eager), the
        response hidden state the log-prob head keeps (its chunks are recomputed), gather index and target."""
        return 8 + 2 * self.head_dim * b + (4 * self.hidden + 4 + b * self.hidden) + b * self.hidden + 16

    def forward_transient_bytes(self, b: int) -> int:
        """Per-token working set of one layer's forward or backward that autograd does not keep: the MLP's
        intermediates (or their gradients), the residual stream and its gradient, an fp32 norm copy."""
        return 3 * b * self.intermediate + 4 * b * self.hidden + 8 * self.hidden

    def head_chunk_bytes(self, b: int, chunk_tokens: int) -> int:
        """One log-prob chunk: logits in b, their fp32 copy, softmax and product (and the gradient)."""
        return chunk_tokens * self.vocab * (b + 12)


@dataclass(frozen=True)
class Adapters:
    """LoRA adapters (``model.lora``) on a model of some shape, as PEFT injects them: ``rank`` x (in + out)
    parameters for each targeted linear layer (``all-linear``: every decoder linear, not the LM head; a list:
    names equal to or ending in an entry; another string: a regex on the full module name).

    ``layer``: the (in, out) features of the adapted linears of the decoder layer with the most adapters (every
    layer alike unless the targets name layers), for what FSDP2 gathers and a layer saves per token."""

    rank: int
    params: int
    layer: tuple[tuple[int, int], ...]
    dropout: bool

    @classmethod
    def of(cls, shape: ModelShape, lora: LoraConfig) -> Adapters:
        targets = lora.target_modules
        per_layer = []
        for index in range(shape.layers):
            names = {f"model.layers.{index}.{name}": fans for name, fans in shape.linears().items()}
            per_layer.append(tuple(fans for name, fans in names.items() if _targeted(name, targets)))
        head = not shape.tied and _targeted("lm_head", targets)  # a tied head: add_adapters refuses it
        fans = [f for layer in per_layer for f in layer] + [(shape.hidden, shape.vocab)] * head
        return cls(
            rank=lora.rank,
            params=lora.rank * sum(a + b for a, b in fans),
            layer=max(per_layer, key=lambda layer: sum(a + b for a, b in layer)),
            dropout=lora.dropout > 0,
        )

    @property
    def layer_params(self) -> int:
        return self.rank * sum(a + b for a, b in self.layer)

    def saved_bytes(self, b: int, adapter_b: int) -> int:
        """Bytes per token autograd saves in one decoder layer's adapters beyond the frozen layer's own: each
        low-rank ``A x`` (``B``'s input), and ``A``'s input when it is a new tensor, not the base layer's: the
        dropout's output (+ its 1-byte mask) or the cast to the adapters' dtype (``adapter_b``: fp32 adapters
        beside a half-precision base when no FSDP2 mixed precision casts them to ``b``). Added to a trained
        layer's ``layer_saved_bytes`` this is an upper bound: the frozen base keeps no inputs for weight
        gradients (counted on CPU for all-linear adapters: 10-20 % less, tests/rl/test_memory_plan.py)."""
        new_input = self.dropout or adapter_b != b
        return sum(
            self.rank * adapter_b + new_input * fan_in * adapter_b + self.dropout * fan_in
            for fan_in, _ in self.layer
        )


def _targeted(name: str, targets: str | list[str]) -> bool:
    """PEFT's match of a module name against ``model.lora.target_modules``."""
    if isinstance(targets, str):
        if targets.lower() == "all-linear":
            return name != "lm_head"
        return re.fullmatch(targets, name) is not None
    return name in targets or any(name.endswith(f".{t}") for t in targets)


@dataclass(frozen=True)
class TrainSetup:
    """What decides a rank's trainer memory, resolved from the config and the device."""

    compute_bytes: int
    master_bytes: int
    world: int = 1
    cpu_offload: bool = False
    checkpointing: bool = False
    checkpoint_every: int = 1
    activation_offload: bool = False
    compiled: bool = False
    reshard_after_forward: bool = True
    reduce_bytes: int = 4
    chunk_tokens: int = 1024
    ref: str = "none"  # none | device | cpu
    critic: bool = False
    fused_optimizer: bool = False
    engine_in_update: int = 0  # bytes the engine holds during the trainer's passes (asleep or awake)
    lora: LoraConfig | None = None  # model.lora when its rank > 0: only the adapters are trained

    def adapters(self, shape: ModelShape) -> Adapters | None:
        return None if self.lora is None else Adapters.of(shape, self.lora)

    @property
    def adapter_bytes(self) -> int:
        """The adapters' compute dtype: ``b`` under FSDP2's mixed precision, else their fp32 masters."""
        return self.compute_bytes if self.master_bytes > self.compute_bytes else 4

    @classmethod
    def of(cls, cfg: Config, *, device: str, dtype: str, world: int) -> TrainSetup:
        m = cfg.model
        b = DTYPE_BYTES[dtype]
        fsdp = {"on": True, "off": False, "auto": world > 1 or device == "cuda"}[m.fsdp]
        compiled = m.compile if m.compile is not None else device == "cuda"
        ref = (
            "none" if cfg.algorithm.kl_coef <= 0 or m.lora.enabled else ("cpu" if m.ref_offload else "device")
        )
        return cls(
            compute_bytes=b,
            master_bytes=4 if fsdp and device == "cuda" else b,
            world=world if fsdp else 1,
            cpu_offload=m.cpu_offload,
            checkpointing=m.gradient_checkpointing,
            checkpoint_every=m.gradient_checkpointing_every,
            activation_offload=m.activation_offload,
            compiled=compiled,
            reshard_after_forward=m.reshard_after_forward,
            reduce_bytes=DTYPE_BYTES[m.reduce_dtype],
            ref=ref,
            critic=cfg.algorithm.name == "ppo",
            fused_optimizer=(
                cfg.optim.fused if cfg.optim.fused is not None else device == "cuda" and not m.cpu_offload
            ),
            lora=m.lora if m.lora.enabled else None,
        )


def trained_bytes(
    shape: ModelShape, s: TrainSetup, adapters: Adapters | None, *, grads: bool = True
) -> dict[str, int]:
    """One trained model's shard of params, gradients and AdamW moments (wherever they live): all in the master
    dtype, or with ``adapters`` the frozen base in the compute dtype and only the fp32 adapters trained."""
    share = math.ceil(shape.params / s.world)
    if adapters is None:
        trained, base = share, 0
        master = s.master_bytes
    else:
        trained, base = math.ceil(adapters.params / s.world), s.compute_bytes * share
        master = 4
    return {
        "params": base + master * trained,
        "grads": master * trained * grads,
        "optimizer": 2 * master * trained,
    }


def kept_bytes(shape: ModelShape, s: TrainSetup, *, grads: bool = True) -> dict[str, int]:
    """What stays on the device between passes: the trained models' shards and states, the reference."""
    share = math.ceil(shape.params / s.world)
    on_device = 0 if s.cpu_offload else 1
    out = {k: v * on_device for k, v in trained_bytes(shape, s, s.adapters(shape), grads=grads).items()}
    if s.critic:  # the critic trains in full (no adapters)
        out["critic"] = sum(trained_bytes(shape, s, None, grads=grads).values()) * on_device
    if s.ref == "device":
        out["reference"] = s.compute_bytes * share
    if s.engine_in_update:
        out["engine"] = s.engine_in_update
    return out


def gathered_bytes(shape: ModelShape, s: TrainSetup) -> int:
    """FSDP2's unsharded parameters (and one layer's unsharded gradients: with LoRA only its adapters') while a
    micro-batch runs."""
    b = s.compute_bytes
    layers = shape.layers if not s.reshard_after_forward else min(2, shape.layers)
    adapters = s.adapters(shape)
    extra = 0 if adapters is None else adapters.layer_params
    trained = shape.layer_params if adapters is None else extra
    grads = 2 * (b + s.reduce_bytes) * trained
    return b * shape.root_params + b * layers * (shape.layer_params + extra) + grads


def activation_bytes(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    """Saved activations of a micro-batch of ``tokens`` (padded block tokens) at the start of backward, plus
    the working set of the layer being recomputed / back-propagated."""
    b = s.compute_bytes
    adapters = s.adapters(shape)
    layer = shape.layer_saved_bytes(b, s.compiled)
    layer += 0 if adapters is None else adapters.saved_bytes(b, s.adapter_bytes)
    ckpt = math.ceil(shape.layers / s.checkpoint_every) if s.checkpointing else 0
    saved = ckpt * b * shape.hidden + (shape.layers - ckpt) * layer + shape.model_saved_bytes(b)
    if s.activation_offload:  # saved on the host; the layer in flight is on the device
        saved = layer
    recompute = layer if ckpt else 0
    return tokens * (saved + recompute + shape.forward_transient_bytes(b) + LOSS_BYTES_PER_TOKEN)


def update_terms(shape: ModelShape, s: TrainSetup, tokens: int) -> dict[str, int]:
    """The update's peak by term: kept memory, gathered weights, activations and the head's chunk, or the
    optimizer step's (kept memory + foreach temporaries) when that is larger."""
    kept = kept_bytes(shape, s)
    chunk = shape.head_chunk_bytes(s.compute_bytes, min(s.chunk_tokens, tokens))
    backward = {
        **kept,
        "gathered": gathered_bytes(shape, s),
        "activations": activation_bytes(shape, s, tokens),
        "logprob_chunk": chunk,
    }
    foreach = not (s.cpu_offload or s.fused_optimizer)  # foreach AdamW: one full-size temporary (sqrt of v)
    adapters = s.adapters(shape)
    trained = trained_bytes(shape, s, adapters)["grads"]  # the temporary is the size of the trained shard
    step = {**kept, "optimizer_step": foreach * trained}
    return backward if sum(backward.values()) >= sum(step.values()) else step


def update_peak(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    return sum(update_terms(shape, s, tokens).values())


def logprob_peak(shape: ModelShape, s: TrainSetup, tokens: int) -> int:
    """A no-grad scoring pass (old log-probs, reference, critic values) over ``tokens``: kept memory (no
    gradients: the optimizer step frees them), gathered weights, one layer's working set and the head's chunk."""
    b = s.compute_bytes
    kept = sum(kept_bytes(shape, s, grads=False).values())
    per_token = shape.forward_transient_bytes(b) + 2 * b * shape.hidden + LOSS_BYTES_PER_TOKEN
    return (
        kept
        + gathered_bytes(shape, s)
        + tokens * per_token
        + shape.head_chunk_bytes(b, min(s.chunk_tokens, tokens))
    )


def largest_budget(shape: ModelShape, s: TrainSetup, usable: int) -> int:
    """The largest micro-batch token budget (a multiple of ``BUDGET_STEP``) whose update peak fits ``usable``
    bytes; 0 when not even ``BUDGET_STEP`` tokens fit. Peaks grow linearly in tokens past one chunk."""
    lo, hi = 0, BUDGET_STEP
    while update_peak(shape, s, hi) <= usable and hi < 1 << 24:
        lo, hi = hi, hi * 2
    while hi - lo > BUDGET_STEP:
        mid = (lo + hi) // 2 // BUDGET_STEP * BUDGET_STEP
        lo, hi = (mid, hi) if update_peak(shape, s, mid) <= usable else (lo, mid)
    return lo


@dataclass(frozen=True)
class EnginePlan:
    """One rollout engine on one device: weights, vLLM's own working set, KV cache for ``max_num_seqs``
    sequences of ``max_model_len`` tokens (``wanted_seqs``: what one step asks of it at once)."""

    weights: int
    overhead: int
    kv_per_token: int
    max_model_len: int
    max_num_seqs: int
    wanted_seqs: int
    share: float | None = None  # rollout.gpu_memory_utilization when the config fixes it

    @property
    def kv(self) -> int:
        return self.max_num_seqs * _blocks(self.max_model_len) * self.kv_per_token

    @property
    def total(self) -> int:
        return self.weights + self.overhead + self.kv

    def utilization(self, capacity: int) -> float:
        """vLLM's gpu_memory_utilization (its share of the device): the config's, or this plan's rounded up to
        1e-3. vLLM takes that share whatever its KV cache needs."""
        if self.share is not None:
            return self.share
        return min(1.0, math.ceil(self.total / capacity * 1000) / 1000)


def _blocks(tokens: int) -> int:
    return math.ceil(tokens / KV_BLOCK) * KV_BLOCK


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
    room = available - weights - engine_overhead(shape, b, seqs, batched, tp)
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
            f"after its weights ({weights / GiB:.1f} GiB) and the trainer: {fix}"
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
    )


@dataclass(frozen=True)
class MemoryPlan:
    """The plan of one rank: its device's capacity, the chosen micro-batch budget and each phase's peak."""

    capacity: int
    usable: int
    micro_batch_tokens: int
    longest: int
    update: dict[str, int]
    logprob: int
    engine: EnginePlan | None
    problem: str | None = None  # one line naming the switch or budget that makes the run fit
    host: int = 0  # pinned host memory the offload switches take (model.cpu_offload, model.ref_offload)
    drafts: int = 0  # host memory of the rank's group drafter index (rollout.speculative.group_max_bytes)

    @property
    def update_peak(self) -> int:
        return sum(self.update.values())

    @property
    def fits(self) -> bool:
        return self.problem is None

    def lines(self) -> list[str]:
        g = _gib
        terms = ", ".join(f"{k} {g(v)}" for k, v in self.update.items() if v)
        out = [
            f"update peak {g(self.update_peak)} at micro_batch_tokens={self.micro_batch_tokens} ({terms}); "
            f"log-prob passes {g(self.logprob)}; usable {g(self.usable)} of {g(self.capacity)}"
        ]
        if self.engine is not None:
            e = self.engine
            out.append(
                f"engine {g(e.total)} (weights {g(e.weights)}, KV {g(e.kv)} for max_num_seqs={e.max_num_seqs} "
                f"of {e.wanted_seqs} wanted x max_model_len={e.max_model_len}, vLLM {g(e.overhead)}): "
                f"gpu_memory_utilization={e.utilization(self.capacity):.3f}"
            )
        if self.host:
            out.append(f"host memory for the offloaded states {g(self.host)}")
        if self.drafts:
            out.append(f"host memory for the group drafter's samples {g(self.drafts)} at most")
        if self.problem:
            out.append(self.problem)
        return out


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def host_bytes(shape: ModelShape, s: TrainSetup) -> int:
    """What the offload switches keep in host memory: with ``cpu_offload`` the trained models' fp32 params,
    gradients and AdamW moments (16 bytes a parameter, per rank's shard; with LoRA the frozen base and the
    adapters' states), with the reference offloaded its weights."""
    share = math.ceil(shape.params / s.world)
    out = 0
    if s.cpu_offload:
        out = sum(trained_bytes(shape, s, s.adapters(shape)).values())
        out += sum(trained_bytes(shape, s, None).values()) if s.critic else 0
    return out + (s.compute_bytes * share if s.ref == "cpu" else 0)


def usable_bytes(capacity: int) -> int:
    return int(capacity * USABLE_SHARE) - DEVICE_RESERVE


SWITCHES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("model.gradient_checkpointing=true", {"checkpointing": True, "checkpoint_every": 1}),
    ("model.cpu_offload=true", {"cpu_offload": True}),
    ("model.activation_offload=true", {"activation_offload": True}),
)


def advice(shape: ModelShape, s: TrainSetup, usable: int, longest: int, budget: int | None) -> str | None:
    """None when the update fits ``usable`` (with ``budget`` tokens, or at least one ``longest`` sequence);
    else one line naming the budget, or the first of ``SWITCHES`` (each alone, then together) that makes it
    fit."""
    need = max(budget or longest, longest)
    if update_peak(shape, s, need) <= usable:
        return None
    peak = _gib(update_peak(shape, s, need))
    largest = largest_budget(shape, s, usable)
    what = f"algorithm.micro_batch_tokens={budget}" if budget else f"one {longest}-token sequence"
    head = f"memory plan: {what} needs {peak} in the update, {_gib(usable)} usable on this device"
    if budget and largest >= longest:
        return f"{head}: set algorithm.micro_batch_tokens<={largest} (or leave it unset: the plan picks it)"
    found = fitting_switches(shape, s, usable, longest)
    if found is not None:
        names, tried = found
        fit = largest_budget(shape, tried, usable)
        return f"{head}: set {' '.join(names)} (then micro_batch_tokens up to {fit} fit)"
    every = " ".join(n for n, c in SWITCHES if _changes(s, c)) or "every memory switch"
    return f"{head}, even with {every}: lower rollout.max_tokens or use more GPUs"


def cpu_advice(shape: ModelShape, s: TrainSetup, usable: int, longest: int, chosen: int) -> str | None:
    """On CPU (the host's memory is the device's): None when the update at ``chosen`` tokens fits ``usable``;
    else one line with the budget or gradient checkpointing that fits (the GPU offload switches do not apply).
    Before: the dry run printed a plan over its own usable memory and then said ok."""
    if update_peak(shape, s, chosen) <= usable:
        return None
    head = (
        f"memory plan: the update at micro_batch_tokens={chosen} needs {_gib(update_peak(shape, s, chosen))}, "
        f"{_gib(usable)} usable in this machine's memory"
    )
    largest = largest_budget(shape, s, usable)
    if largest >= longest:
        return f"{head}: set algorithm.micro_batch_tokens={largest}"
    if not s.checkpointing:
        tried = replace(s, checkpointing=True, checkpoint_every=1)
        if update_peak(shape, tried, longest) <= usable:
            return f"{head}: set model.gradient_checkpointing=true"
    return f"{head}: lower rollout.max_tokens, use a smaller model or a GPU"


def _changes(s: TrainSetup, change: dict[str, Any]) -> bool:
    return any(getattr(s, k) != v for k, v in change.items())


def fitting_switches(
    shape: ModelShape, s: TrainSetup, usable: int, longest: int
) -> tuple[list[str], TrainSetup] | None:
    """The first of ``SWITCHES`` not yet on (each alone, then together in order) under which one ``longest``
    sequence's update fits ``usable``: their ``key=value`` names and the setup; None if none does."""
    todo = [(name, change) for name, change in SWITCHES if _changes(s, change)]
    for combo in [[c] for c in todo] + [todo[:n] for n in range(2, len(todo) + 1)]:
        tried = replace(s, **{k: v for _, change in combo for k, v in change.items()})
        if update_peak(shape, tried, longest) <= usable:
            return [name for name, _ in combo], tried
    return None


def plan_run(
    cfg: Config,
    shape: ModelShape,
    *,
    device: str,
    dtype: str,
    capacity: int,
    world: int,
    max_model_len: int,
    engine: bool,
    host_capacity: int | None = None,
) -> MemoryPlan:
    """The plan of one training rank of ``cfg`` on a device of ``capacity`` bytes (``world`` training ranks;
    ``engine``: a vLLM engine on CUDA, sized here, colocated or on a rollout rank of its own). The micro-batch
    budget is ``algorithm.micro_batch_tokens``, or (None) the largest that fits (``CPU_MICRO_BATCH_TOKENS`` on
    CPU). A config that cannot fit (the device, or ``host_capacity`` bytes of host memory for the offloaded
    states) gets ``problem``: one line with the fix."""
    s = TrainSetup.of(cfg, device=device, dtype=dtype, world=world)
    usable = usable_bytes(capacity)
    r = cfg.rollout
    plan: EnginePlan | None = None
    problem = None
    if engine and device == "cuda":
        colocated = cfg.resources.placement == "colocated"
        engines = world if colocated else max(cfg.resources.rollout_ranks // r.tensor_parallel_size, 1)
        resident = sum(kept_bytes(shape, s, grads=False).values()) if colocated else 0
        available = usable - resident
        if r.gpu_memory_utilization is not None:
            available = min(available, int(r.gpu_memory_utilization * capacity))
        try:
            plan = plan_engine(
                shape,
                cfg,
                dtype=dtype,
                available=available,
                max_model_len=max_model_len,
                wanted_seqs=math.ceil(cfg.trainer.batch_size / engines) * r.n,
            )
        except ConfigError as exc:
            problem = str(exc)
        if plan is not None and colocated:
            asleep = r.sleep is not False
            held = int(plan.utilization(capacity) * capacity)
            s = replace(s, engine_in_update=ENGINE_ASLEEP if asleep else held)
    budget = cfg.algorithm.micro_batch_tokens
    if budget is None:
        largest = largest_budget(shape, s, usable)
        chosen = max(largest if device == "cuda" else CPU_MICRO_BATCH_TOKENS, max_model_len)
    else:
        chosen = budget
    problem = problem or (
        advice(shape, s, usable, max_model_len, budget)
        if device == "cuda"
        else cpu_advice(shape, s, usable, max_model_len, chosen)
    )
    host = host_bytes(shape, s) if device == "cuda" else 0
    spec = r.speculative
    drafts = spec.group_max_bytes if engine and spec.method == "group" else 0
    if problem is None and host_capacity is not None and host + drafts > int(host_capacity * HOST_SHARE):
        problem = (
            f"memory plan: the offloaded states need {_gib(host)} of pinned host memory"
            + (f" and the group drafter up to {_gib(drafts)}" if drafts else "")
            + f", this host has {_gib(host_capacity)}: offload less (model.cpu_offload=false), lower "
            "rollout.speculative.group_max_bytes or use more GPUs"
        )
    return MemoryPlan(
        capacity=capacity,
        usable=usable,
        micro_batch_tokens=chosen,
        longest=max_model_len,
        update=update_terms(shape, s, chosen),
        logprob=logprob_peak(shape, s, chosen),
        engine=plan,
        problem=problem,
        host=host,
        drafts=drafts,
    )
