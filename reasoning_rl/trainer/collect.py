"""Generate and grade one batch with grading overlapped: each completion is submitted to the grading pool
the moment the engine finishes it, so after generation ends the step only waits for the stragglers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from graders.runtime import GradingPool
from graders.types import Grade, GradeContext
from reasoning_rl.data import Prompt
from reasoning_rl.rollout import Completion, RolloutEngine, SamplingConfig
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts, Sample
from reasoning_rl.trainer.reward_plan import RewardPlan, example_context


def collect(
    engine: RolloutEngine,
    pool: GradingPool,
    prompts: Sequence[Prompt],
    sampling: SamplingConfig,
    *,
    rewards: RewardPlan,
    trace: TraceWriter | None = None,
    step: int = 0,
    group_offset: int = 0,
) -> Rollouts:
    """Samples in (prompt, sample) order, each with its grade (every reward component of ``rewards``, with the
    row as context); prompt k is group ``group_offset + k``."""
    completions: dict[tuple[int, int], Completion] = {}
    parts: dict[tuple[int, int], list[Grade | None]] = {}
    contexts: dict[int, GradeContext] = {}
    t0 = time.time()

    def take(finished: list[tuple[Any, Grade]]) -> None:
        for req, grade in finished:
            key, component = req.id
            parts[key][component] = grade

    for comp in engine.stream([p.token_ids for p in prompts], sampling):
        key = (comp.prompt_index, comp.sample_index)
        completions[key] = comp
        ex = prompts[comp.prompt_index].example
        if comp.prompt_index not in contexts:
            contexts[comp.prompt_index] = example_context(ex)
        requests = rewards.requests(ex, comp.text, contexts[comp.prompt_index], key)
        parts[key] = [None] * len(requests)
        for req in requests:
            pool.submit(req)
        take(pool.poll(0.0))
    t1 = time.time()
    graded_during_generation = sum(1 for got in parts.values() if None not in got)
    take(list(pool.results()))
    grades = {key: [g for g in got if g is not None] for key, got in parts.items() if None not in got}
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
    samples = []
    for k in sorted(completions):
        ex = prompts[k[0]].example
        grade, composed = rewards.combine(ex, grades[k])
        samples.append(Sample(group_offset + k[0], ex, completions[k], grade, composed))
    return Rollouts(samples)
