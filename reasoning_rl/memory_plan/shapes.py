"""A model's sizes, from its ``config.json``, and the LoRA adapters PEFT would inject into it: what every other
part of the plan multiplies by bytes."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reasoning_rl.config import LoraConfig

GiB = 1 << 30
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def gib(n: int) -> str:
    """Bytes as the plan's lines show them."""
    return f"{n / GiB:.1f} GiB"


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
