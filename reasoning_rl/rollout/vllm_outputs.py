"""vLLM's questions and answers in the engine's terms: a request's ``SamplingParams``, a finished request as a
``Completion``, an unfinished one's output so far as a ``Delta``, prompt log-probs as rows of floats, and vLLM's
refusal to start for lack of free memory as one line."""

from __future__ import annotations

from typing import Any

from reasoning_rl.rollout.base import Completion, Delta, DraftCounts, RolloutError, SamplingConfig
from reasoning_rl.rollout.version_spans import VersionSpans


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


def request_params(sampling: SamplingConfig, seed: int | None, *, delta: bool = False) -> Any:
    """vLLM's ``SamplingParams`` for one sample of ``sampling`` with ``seed``; ``delta``: one output per step."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=1,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_tokens,
        stop=list(sampling.stop) or None,
        seed=seed,
        logprobs=0 if sampling.logprobs else None,
        ignore_eos=sampling.ignore_eos,
        # Only finished requests come back (the default re-sends every request's cumulative tokens and
        # log-probs each step), and text is decoded once at the end unless stop strings need it live.
        # (``Request.deltas``: each step's new tokens, which carry the policy version of that step)
        output_kind=RequestOutputKind.DELTA if delta else RequestOutputKind.FINAL_ONLY,
        detokenize=bool(sampling.stop),
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
    return Completion(
        prompt_index=prompt_index,
        sample_index=sample_index,
        prompt_ids=prompt_ids,
        token_ids=token_ids,
        logprobs=sampled_logprobs(seq.logprobs, token_ids),
        text=text,
        finish_reason="length" if seq.finish_reason == "length" else "stop",
        versions=[version] * len(token_ids),
        drafts=drafts,
    )


def sampled_logprobs(steps: Any, token_ids: list[int]) -> list[float]:
    """Each sampled token's log-prob from vLLM's per-position log-probs (none requested: empty)."""
    return [float(step[tok].logprob) for step, tok in zip(steps, token_ids, strict=True)] if steps else []


def prompt_logprob_rows(
    sequences: list[list[int]], prompt_lens: list[int], outs: list[Any]
) -> list[list[float]]:
    """Each sequence's log-probs of its tokens after its first ``prompt_len``, from vLLM's prompt log-probs."""
    result = []
    for seq, p, out in zip(sequences, prompt_lens, outs, strict=True):
        steps = out.prompt_logprobs or []
        row = []
        for k in range(p, len(seq)):
            step = steps[k]
            if step is None:
                raise RolloutError(f"vLLM returned no prompt log-prob at position {k}")
            row.append(float(step[seq[k]].logprob))
        result.append(row)
    return result


def partial_delta(rid: str, state: Any, spans: VersionSpans, logprobs: list[float] | None = None) -> Delta:
    """An unfinished request's output so far, from vLLM's output-processor state (``RequestState``: it keeps
    every token, and the log-probs unless the engine keeps them itself: ``logprobs``), each token's version from
    ``spans``."""
    token_ids = list(state.detokenizer.output_token_ids)
    version, versions = spans.versions(rid, len(token_ids))
    if logprobs is None:
        logprobs = sampled_logprobs(state.logprobs_processor.logprobs, token_ids)
    return Delta(
        id=rid,
        token_ids=token_ids,
        logprobs=logprobs,
        text=state.detokenizer.get_next_output_text(False, False),
        finished=False,
        finish_reason="",
        cached_tokens=state.num_cached_tokens,
        version=version,
        versions=versions,
    )
