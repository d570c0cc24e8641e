"""The tool side of a step's samples (``rollout.tools``; the trajectories themselves come from the frontier's
``ToolTurns``): the trace counters, the metrics and the samples-file fields of tool rollouts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reasoning_rl.rollout import Completion
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts


def trace_tools(trace: TraceWriter, step: int, completions: Iterable[Completion]) -> None:
    """Counters ``rrl report`` reads (docs/trace-schema.md): ``tool_latency_ms`` per call (tool, status) and
    ``tool_turns`` per trajectory (its number of calls; finish reason), for a step's trained tool samples.
    Counters, not spans: calls overlap generation, and a span would count their time twice in the timeline."""
    for c in completions:
        if c.mask is None:
            continue
        for turn in c.turns:
            r = turn.result
            trace.counter("tool_latency_ms", step, r.latency_s * 1000, tool=turn.name, status=r.status)
        trace.counter("tool_turns", step, len(c.turns), finish=c.finish_reason)


def masked_spans(mask: list[int]) -> list[list[int]]:
    """``[start, end)`` response-token ranges where ``mask`` is 0: the inserted tool turns, not trained on."""
    spans: list[list[int]] = []
    for i, m in enumerate(mask):
        if m:
            continue
        if spans and spans[-1][1] == i:
            spans[-1][1] = i + 1
        else:
            spans.append([i, i + 1])
    return spans


def turn_fields(c: Completion) -> dict[str, Any]:
    """A samples-file row's view of a tool rollout: every tool turn (call, status, output, latency) and the
    loss mask (``trained_tokens`` of ``response_tokens``; ``tool_token_spans``: the untrained inserted ones)."""
    if c.mask is None:
        return {}
    out: dict[str, Any] = {
        "tool_calls": len(c.turns),
        "turns": [turn.to_dict() for turn in c.turns],
        "response_tokens": len(c.mask),
        "trained_tokens": sum(c.mask),
        "tool_token_spans": masked_spans(c.mask),
    }
    if c.error:
        out["rollout_error"] = c.error
    return out


def tool_metrics(rollouts: Rollouts) -> dict[str, float]:
    """The step's tool use for metrics.jsonl (empty without tools): calls per sample, errors, turns."""
    comps = [s.completion for s in rollouts if s.completion.mask is not None]
    if not comps:
        return {}
    turns = [turn for c in comps for turn in c.turns]
    return {
        "tools/calls_per_sample": len(turns) / len(comps),
        "tools/errors": float(sum(t.result.status not in ("ok", "infra_error") for t in turns)),
        "tools/infra_errors": float(sum(t.result.status == "infra_error" for t in turns)),
        "tools/max_turns_reached": float(sum(c.finish_reason == "max_turns" for c in comps)),
    }
