"""What is trained and how: the model section and the optimizer section."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reasoning_rl.config.base import _Section


class LoraConfig(_Section):
    """PEFT LoRA adapters on the policy (rank 0: off, full fine-tuning). Only the adapters are trained,
    checkpointed and (split placement) sent; the reference for a KL term is the base with them disabled."""

    rank: int = Field(
        default=0,
        ge=0,
        le=512,
        description="LoRA rank r of every adapted layer; 0: no adapters (full fine-tuning).",
    )
    alpha: int = Field(
        default=32, gt=0, description="LoRA alpha: the adapter's output is scaled by alpha / rank."
    )
    target_modules: str | list[str] = Field(
        default="all-linear",
        description="Layers that get adapters: 'all-linear' (every linear layer but the LM head, PEFT's "
        "name) or a list of module names (e.g. [q_proj, v_proj]).",
    )
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input.")

    @property
    def enabled(self) -> bool:
        return self.rank > 0


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
    gradient_checkpointing_every: int = Field(
        default=1,
        ge=1,
        description="With gradient_checkpointing: recompute one decoder layer in every k (1: all; 2: every "
        "other one, half the recompute for a bit more memory).",
    )
    activation_offload: bool = Field(
        default=False,
        description="Keep the tensors autograd saves for backward in host memory "
        "(torch.autograd.graph.save_on_cpu) during the update: activation memory of about one layer, "
        "at the cost of copies to and from the host.",
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
    lora: LoraConfig = Field(
        default_factory=LoraConfig,
        description="LoRA adapters (model.lora.rank > 0) instead of full fine-tuning; see docs/lora.md.",
    )
    compile: bool | None = Field(
        default=None,
        description="torch.compile each decoder layer and the log-prob head "
        "of the trained models (faster updates after a one-off compile; one graph serves "
        "every micro-batch shape). None: on when training on CUDA, off on CPU.",
    )

    @model_validator(mode="after")
    def _lora_reference(self) -> ModelConfig:
        if self.lora.enabled and self.ref_offload:
            raise ValueError(
                "model.ref_offload: a LoRA run's reference is its own base model with the adapters disabled, "
                "so there is no second copy to offload; unset model.ref_offload"
            )
        return self


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
    fused: bool | None = Field(
        default=None,
        description="AdamW's fused kernel (no full-size temporaries in the optimizer step: 4 bytes a "
        "parameter less at its peak than the foreach one). None: on CUDA unless model.cpu_offload.",
    )
    critic_lr: float = Field(
        default=1e-5, gt=0.0, description="AdamW learning rate of the critic (algorithm.name=ppo)."
    )
