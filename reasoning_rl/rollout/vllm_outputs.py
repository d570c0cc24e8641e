"""vLLM's answers in the engine's terms: a finished request as a ``Completion``, and vLLM's refusal to start
for lack of free memory as one line."""

from __future__ import annotations

from typing import Any

from reasoning_rl.rollout.base import Completion, DraftCounts


def startup_memory_refusal(exc: ValueError, share: float, on_gpu: bool) -> str | None:
    """vLLM's refusal to start for lack of free memory (it wants ``share`` of the device, or of the host's RAM
    on CPU, free at start) as one line in our terms; None for any other error."""
    text = str(exc)
    if "on startup is less than" not in text:
        return None
    where = "GPU memory" if on_gpu else "RAM (vLLM's CPU backend reserves that share of it for its KV cache)"
    return (
        f"the vLLM engine cannot start: it needs {share:.0%} of the {where} free and less is free now "
        f"({text.split(' on startup')[0]}); stop the other heavy process (another training run or vLLM "
        "engine?) or lower rollout.gpu_memory_utilization"
    )


def to_completion(
    out: Any,
    prompt_index: int,
    sample_index: int,
    prompt_ids: list[int],
    tokenizer: Any,
    drafts: DraftCounts | None,
    version: int,
) -> Completion:
    """A finished vLLM ``RequestOutput`` (one sample) with its draft counts (None with speculation off),
    sampled by policy ``version``."""
    (seq,) = out.outputs
    token_ids = list(seq.token_ids)
    text = seq.text or tokenizer.decode(
        token_ids, skip_special_tokens=True
    )  # not detokenized without stop strings
    logprobs = (
        [float(step[tok].logprob) for step, tok in zip(seq.logprobs, token_ids, strict=True)]
        if seq.logprobs
        else []
    )
    return Completion(
        prompt_index=prompt_index,
        sample_index=sample_index,
        prompt_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=logprobs,
        text=text,
        finish_reason="length" if seq.finish_reason == "length" else "stop",
        versions=[version] * len(token_ids),
        drafts=drafts,
    )
