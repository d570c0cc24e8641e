"""Per-step numbers of ``rollout.speculative`` from the completions' draft counts (vLLM's own per-request
spec-decode counters): how often drafts were right and how many decode steps a generated token cost."""

from __future__ import annotations

from collections.abc import Sequence

from reasoning_rl.rollout import Completion
from reasoning_rl.trace import TraceWriter


def draft_metrics(completions: Sequence[Completion]) -> dict[str, float]:
    """``speculative/*`` of the completions that carry draft counts; {} when none does (speculation off).

    acceptance_rate: accepted / proposed draft tokens. accepted_len_mean: accepted tokens per verify step that
    carried a draft. steps_per_token: decode steps (one per forward pass of a sequence: its generated tokens
    minus the accepted drafts) per generated model token; 1.0 is no gain."""
    counted = [(c, c.drafts) for c in completions if c.drafts is not None]
    if not counted:
        return {}
    drafts = sum(d.drafts for _, d in counted)
    proposed = sum(d.draft_tokens for _, d in counted)
    accepted = sum(d.accepted for _, d in counted)
    generated = sum(sum(c.mask) if c.mask is not None else len(c.token_ids) for c, _ in counted)
    return {
        "speculative/accepted_tokens": float(accepted),
        "speculative/acceptance_rate": accepted / proposed if proposed else 0.0,
        "speculative/accepted_len_mean": accepted / drafts if drafts else 0.0,
        "speculative/steps_per_token": (generated - accepted) / generated if generated else 1.0,
        "speculative/draft_tokens": float(proposed),
    }


def trace_drafts(trace: TraceWriter, step: int, metrics: dict[str, float]) -> None:
    """The step's raw counts as trace counters (``draft_tokens`` proposed, ``draft_accepted``); none when off."""
    if "speculative/draft_tokens" in metrics:
        trace.counter("draft_tokens", step, metrics["speculative/draft_tokens"])
        trace.counter("draft_accepted", step, metrics["speculative/accepted_tokens"])
