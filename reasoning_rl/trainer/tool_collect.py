"""``collect`` with tools: multi-turn rollouts (``rollout.multiturn``), each trajectory graded the moment it
finishes while the others are still generating or waiting for their tools. A trajectory our infrastructure
ruined (a sandbox failure) is not graded: its sample gets an ``error`` grade and is masked, never a fake 0."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from graders.runtime import GradeRequest, GradingPool
from graders.types import Grade
from reasoning_rl.data import Prompt
from reasoning_rl.rollout import Completion, RolloutEngine, SamplingConfig
from reasoning_rl.rollout.multiturn import ToolTrajectory, run_tool_rollouts
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts, Sample


def collect_with_tools(
    engine: RolloutEngine,
    pool: GradingPool,
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    tools: ToolSet,
    *,
    grader_options: dict[str, dict[str, Any]],
    trace: TraceWriter | None = None,
    step: int = 0,
    group_offset: int = 0,
) -> Rollouts:
    """Samples in (prompt, sample) order, as ``collect``; completions carry ``mask``, ``turns`` and ``error``."""
    completions: dict[tuple[int, int], Completion] = {}
    grades: dict[tuple[int, int], Grade] = {}

    def finished(t: ToolTrajectory) -> None:
        key = (t.prompt_index, t.sample_index)
        comp = completions[key] = t.completion(tools.tokenizer)
        if comp.error:
            grades[key] = Grade.error(f"rollout infrastructure: {comp.error}")
            return
        ex = prompts[t.prompt_index].example
        pool.submit(
            GradeRequest(ex.grader, comp.text, ex.ground_truth, grader_options.get(ex.grader, {}), id=key)
        )
        for req, grade in pool.poll(0.0):
            grades[req.id] = grade

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
    graded_during_generation = len(grades)
    for req, grade in pool.results():
        grades[req.id] = grade
    t2 = time.time()
    if trace is not None:
        trace_tools(trace, step, trajs)
        trace.add_span("generate", step, t0, t1, prompts=len(prompts), samples=len(completions))
        trace.add_span(
            "grade_wait",
            step,
            t1,
            t2,
            graded_during_generation=graded_during_generation,
            outstanding_at_generation_end=len(completions) - graded_during_generation,
        )
    missing = set(completions) - set(grades)
    if missing or len(completions) != len(trajs):
        raise RuntimeError(
            f"tool rollout: {len(trajs)} trajectories, {len(completions)} finished, {len(missing)} ungraded"
        )
    return Rollouts(
        [
            Sample(group_offset + k[0], prompts[k[0]].example, completions[k], grades[k])
            for k in sorted(completions)
        ]
    )


def trace_tools(trace: TraceWriter, step: int, trajs: list[ToolTrajectory]) -> None:
    """Counters ``rrl report`` reads (docs/trace-schema.md): ``tool_latency_ms`` per call (tool, status) and
    ``tool_turns`` per trajectory (its number of calls; finish reason). Counters, not spans: calls overlap
    generation, and a span would count their time twice in the stage timeline."""
    for t in trajs:
        for turn in t.turns:
            r = turn.result
            trace.counter("tool_latency_ms", step, r.latency_s * 1000, tool=turn.name, status=r.status)
        trace.counter("tool_turns", step, len(t.turns), finish=t.finish_reason)


def turn_fields(c: Completion) -> dict[str, Any]:
    """A samples-file row's view of a tool rollout: every tool turn (call, status, output, latency)."""
    if c.mask is None:
        return {}
    out: dict[str, Any] = {"tool_calls": len(c.turns), "turns": [turn.to_dict() for turn in c.turns]}
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
