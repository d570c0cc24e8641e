"""``rollout.speculative``: model-free speculative decoding in the vLLM engine (issue 34).

Drafts cost no model: ``ngram`` looks the last tokens up in the request's own context (vLLM's prompt lookup),
``suffix`` is vLLM's suffix-tree drafting (needs the arctic-inference package), ``group`` looks them up in
earlier samples of the same prompt (this step's finished siblings, earlier epochs: ``rollout/group_drafts.py``).
The target model verifies every draft (rejection sampling), so the tokens, sampled or greedy, and the returned
log-probs are the policy's own (docs/speculative.md: the exactness tests). ``max_batch`` limits drafting to the
tail of a batch, where decoding is latency-bound and speculation can pay.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from reasoning_rl.config.base import _Section

SpeculativeMethod = Literal["off", "ngram", "suffix", "group"]


class SpeculativeConfig(_Section):
    method: SpeculativeMethod = Field(
        default="off",
        description="off; ngram (prompt lookup in the request's own tokens); suffix (vLLM's suffix decoding, "
        "needs arctic-inference); group (lookup in earlier samples of the same prompt: this step's finished "
        "siblings and earlier epochs, never other prompts). vLLM engine only.",
    )
    num_speculative_tokens: int = Field(
        default=4, ge=1, le=32, description="Most draft tokens verified per decode step."
    )
    lookup_min: int = Field(
        default=2, ge=1, description="ngram / group: shortest n-gram of the context's end that must match."
    )
    lookup_max: int = Field(
        default=4, ge=1, description="ngram / group: longest n-gram tried first (longest match wins)."
    )
    group_samples: int = Field(
        default=16, ge=1, description="group: earlier samples kept per prompt (oldest dropped first)."
    )
    group_max_bytes: int = Field(
        default=1 << 30,
        ge=1 << 20,
        description="group: host memory the kept samples may take, in bytes, per engine (12 bytes a kept token; "
        "least recently used prompts dropped first). Counted in the memory plan.",
    )
    max_batch: int = Field(
        default=0,
        ge=0,
        description="Draft only while at most this many requests run in the engine (the tail of a batch, where a "
        "decode step is latency-bound); 0: always. Above it the engine decodes as without speculation.",
    )

    @model_validator(mode="after")
    def _window(self) -> SpeculativeConfig:
        if self.lookup_min > self.lookup_max:
            raise ValueError(f"lookup_min={self.lookup_min} must be <= lookup_max={self.lookup_max}")
        return self

    @property
    def on(self) -> bool:
        return self.method != "off"
