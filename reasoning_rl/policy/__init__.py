"""Training side: model loading, token batches, the FSDP2 policy, the frozen reference, the critic."""

from reasoning_rl.policy.batch import TokenBatch, build_batch, plan_micro_batches
from reasoning_rl.policy.critic import Critic
from reasoning_rl.policy.model import (
    ModelLoadError,
    convert_gguf,
    load_causal_lm,
    load_tokenizer,
    smollm2_gguf,
    smollm2_hf_dir,
)
from reasoning_rl.policy.policy import Policy
from reasoning_rl.policy.reference import AdapterOffReference, ReferencePolicy

__all__ = [
    "AdapterOffReference",
    "Critic",
    "ModelLoadError",
    "Policy",
    "ReferencePolicy",
    "TokenBatch",
    "build_batch",
    "convert_gguf",
    "load_causal_lm",
    "load_tokenizer",
    "plan_micro_batches",
    "smollm2_gguf",
    "smollm2_hf_dir",
]
