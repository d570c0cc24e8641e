"""Generate and grade one batch with grading overlapped: each completion is submitted to the grading pool
the moment the engine finishes it, so after generation ends the step only waits for the stragglers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from graders.runtime import GradeRequest, GradingPool
from graders.types import Grade
from reasoning_rl.data import Prompt
from reasoning_rl.rollout import Completion, RolloutEngine, SamplingConfig
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts, Sample


def collect(
    engine: RolloutEngine,
    pool: GradingPool,
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    *,
    grader_options: dict[str, dict[str, Any]],
    trace: TraceWriter | None = None,
    step: int = 0,
    group_offset: int = 0,
    tools: ToolSet | None = None,
) -> Rollouts:
    """Samples in (prompt, sample) order, each with its grade; prompt k is group ``group_offset + k``.
    With ``tools`` (``rollout.tools``) each sample is a multi-turn tool rollout (``tool_collect``)."""
    if tools is not None:
        from reasoning_rl.trainer.tool_collect import collect_with_tools

        return collect_with_tools(
            engine,
            pool,
            prompts,
            sampling,
            tools,
            grader_options=grader_options,
            trace=trace,
            step=step,
            group_offset=group_offset,
        )
    completions: dict[tuple[int, int], Completion] = {}
    grades: dict[tuple[int, int], Grade] = {}
    t0 = time.time()
    for comp in engine.stream([p.token_ids for p in prompts], sampling):
        key = (comp.prompt_index, comp.sample_index)
        completions[key] = comp
        ex = prompts[comp.prompt_index].example
        pool.submit(
            GradeRequest(ex.grader, comp.text, ex.ground_truth, grader_options.get(ex.grader, {}), id=key)
        )
        for req, grade in pool.poll(0.0):
            grades[req.id] = grade
    t1 = time.time()
    graded_during_generation = len(grades)
    for req, grade in pool.results():
        grades[req.id] = grade
    t2 = time.time()
    if trace is not None:
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
    if missing:
        raise RuntimeError(f"grading pool returned no grade for {len(missing)} samples (e.g. {min(missing)})")
    return Rollouts(
        [
            Sample(group_offset + k[0], prompts[k[0]].example, completions[k], grades[k])
            for k in sorted(completions)
        ]
    )
