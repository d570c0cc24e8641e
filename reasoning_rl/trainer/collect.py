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
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts, Sample
from reasoning_rl.trainer.reward_plan import RewardPlan, example_context

Key = tuple[int, int]  # (prompt index, sample index)


class StreamGrading:
    """The grading side of a collect: every reward component of ``rewards`` for each completion, with its row
    as context, submitted as the completion arrives; then the stragglers, and the combined grade per sample.
    Single-turn and tool rollouts share it, so both grade the same way."""

    def __init__(self, pool: GradingPool, prompts: Sequence[Prompt], rewards: RewardPlan) -> None:
        self.pool = pool
        self.prompts = prompts
        self.rewards = rewards
        self.completions: dict[Key, Completion] = {}
        self._parts: dict[Key, list[Grade | None]] = {}
        self._contexts: dict[int, GradeContext] = {}
        self._failed: set[Key] = set()

    def submit(self, key: Key, comp: Completion) -> None:
        self.completions[key] = comp
        ex = self.prompts[key[0]].example
        if key[0] not in self._contexts:
            self._contexts[key[0]] = example_context(ex)
        requests = self.rewards.requests(ex, comp.text, self._contexts[key[0]], key)
        self._parts[key] = [None] * len(requests)
        for req in requests:
            self.pool.submit(req)
        self._take(self.pool.poll(0.0))

    def fail(self, key: Key, comp: Completion, grade: Grade) -> None:
        """A sample not sent to the graders (e.g. a tool rollout our infrastructure ruined): ``grade`` stands."""
        self.completions[key] = comp
        self._parts[key] = [grade]
        self._failed.add(key)

    def graded(self) -> int:
        return sum(1 for got in self._parts.values() if None not in got)

    def wait(self) -> None:
        self._take(list(self.pool.results()))

    def _take(self, finished: list[tuple[Any, Grade]]) -> None:
        for req, grade in finished:
            key, component = req.id
            self._parts[key][component] = grade

    def rollouts(self, group_offset: int) -> Rollouts:
        grades = {k: [g for g in got if g is not None] for k, got in self._parts.items() if None not in got}
        missing = set(self.completions) - set(grades)
        if missing:
            raise RuntimeError(
                f"grading pool returned no grade for {len(missing)} samples (e.g. {min(missing)})"
            )
        samples = []
        for k in sorted(self.completions):
            ex = self.prompts[k[0]].example
            if k in self._failed:
                grade, composed = grades[k][0], None
            else:
                grade, composed = self.rewards.combine(ex, grades[k])
            samples.append(Sample(group_offset + k[0], ex, self.completions[k], grade, composed))
        return Rollouts(samples)

    def trace(
        self, trace: TraceWriter | None, step: int, t0: float, t1: float, t2: float, *, graded: int
    ) -> None:
        if trace is None:
            return
        n = len(self.completions)
        trace.add_span("generate", step, t0, t1, prompts=len(self.prompts), samples=n)
        trace.add_span(
            "grade_wait",
            step,
            t1,
            t2,
            graded_during_generation=graded,
            outstanding_at_generation_end=n - graded,
        )


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
    tools: ToolSet | None = None,
) -> Rollouts:
    """Samples in (prompt, sample) order, each with its grade (every reward component of ``rewards``, with the
    row as context); prompt k is group ``group_offset + k``. With ``tools`` (``rollout.tools``) each sample
    is a multi-turn tool rollout (``tool_collect``)."""
    if tools is not None:
        from reasoning_rl.trainer.tool_collect import collect_with_tools

        return collect_with_tools(
            engine,
            pool,
            prompts,
            sampling,
            tools,
            rewards=rewards,
            trace=trace,
            step=step,
            group_offset=group_offset,
        )
    grading = StreamGrading(pool, prompts, rewards)
    t0 = time.time()
    for comp in engine.stream([p.token_ids for p in prompts], sampling):
        grading.submit((comp.prompt_index, comp.sample_index), comp)
    t1 = time.time()
    graded = grading.graded()
    grading.wait()
    grading.trace(trace, step, t0, t1, time.time(), graded=graded)
    return grading.rollouts(group_offset)
