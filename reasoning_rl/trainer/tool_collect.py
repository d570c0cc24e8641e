"""``collect`` with tools: multi-turn rollouts (``rollout.multiturn``), each trajectory graded the moment it
finishes while the others are still generating or waiting for their tools. A trajectory our infrastructure
ruined (a sandbox failure) is not graded: its sample gets an ``error`` grade and is masked, never a fake 0."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from graders.runtime import GradingPool
from graders.types import Grade
from reasoning_rl.data import Prompt
from reasoning_rl.rollout import Completion, RolloutEngine, SamplingConfig
from reasoning_rl.rollout.multiturn import ToolTrajectory, run_tool_rollouts
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import StreamGrading
from reasoning_rl.trainer.records import Rollouts
from reasoning_rl.trainer.reward_plan import RewardPlan


def collect_with_tools(
    engine: RolloutEngine,
    pool: GradingPool,
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    tools: ToolSet,
    *,
    rewards: RewardPlan,
    trace: TraceWriter | None = None,
    step: int = 0,
    group_offset: int = 0,
) -> Rollouts:
    """Samples in (prompt, sample) order, as ``collect``; completions carry ``mask``, ``turns`` and ``error``."""
    grading = StreamGrading(pool, prompts, rewards)

    def finished(t: ToolTrajectory) -> None:
        key = (t.prompt_index, t.sample_index)
        comp = t.completion(tools.tokenizer)
        if comp.error:
            grading.fail(key, comp, Grade.error(f"rollout infrastructure: {comp.error}"))
        else:
            grading.submit(key, comp)

    t0 = time.time()
    trajs = asyncio.run(
        run_tool_rollouts(
            engine,
            [p.token_ids for p in prompts],
            tools.tools,
            tools.tokenizer,
            tools.rollout_config(sampling),
            n=sampling.n,
            on_finish=finished,
        )
    )
    t1 = time.time()
    graded = grading.graded()
    grading.wait()
    if trace is not None:
        trace_tools(trace, step, trajs)
    grading.trace(trace, step, t0, t1, time.time(), graded=graded)
    if len(grading.completions) != len(trajs):
        raise RuntimeError(f"tool rollout: {len(trajs)} trajectories, {len(grading.completions)} finished")
    return grading.rollouts(group_offset)


def trace_tools(trace: TraceWriter, step: int, trajs: list[ToolTrajectory]) -> None:
    """Counters ``rrl report`` reads (docs/trace-schema.md): ``tool_latency_ms`` per call (tool, status) and
    ``tool_turns`` per trajectory (its number of calls; finish reason). Counters, not spans: calls overlap
    generation, and a span would count their time twice in the stage timeline."""
    for t in trajs:
        for turn in t.turns:
            r = turn.result
            trace.counter("tool_latency_ms", step, r.latency_s * 1000, tool=turn.name, status=r.status)
        trace.counter("tool_turns", step, len(t.turns), finish=t.finish_reason)


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
