"""From completions to graded samples, for single-turn and tool rollouts alike: which graders judge a row and
how their grades become its reward (``RewardPlan``), the grading stream (``StreamGrading``: each completion is
submitted to the grading pool the moment the frontier (``trainer/frontier``, the one rollout loop) finishes
it, so after generation ends the step only waits for the stragglers). A completion our infrastructure ruined (``Completion.error``: a sandbox failure) is not graded: its sample gets an
``error`` grade and is masked, never a fake 0.

The reward components are ``grading.rewards`` (every row) or ``grading.source_rewards`` (per ``data_source``),
else the row's own grader alone. The combination itself is ``graders.compose`` (one implementation for rollouts
and evaluation); ``RewardPlan`` only resolves the config per row and checks, before step 1, that each grader's
declared context fields exist in every row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from graders.compose import ComposedReward, RewardTerm, compose, no_answer
from graders.runtime import GradeRequest, GradingPool, resolve_grader
from graders.types import ContextField, Grade, GradeContext, context_fields
from reasoning_rl.config import GradingConfig, RewardTermConfig
from reasoning_rl.data import DataError, Example, Prompt
from reasoning_rl.rollout import Completion
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.records import Rollouts, Sample

Key = tuple[int, int]  # (prompt index, sample index)


def example_context(ex: Example) -> GradeContext:
    """The row as a grader may see it (only graders declaring ``context_fields`` get any of it)."""
    return GradeContext.from_messages(
        ex.messages, data_source=ex.data_source, extra_info=ex.extra_info, row_id=ex.uid
    )


@cache
def _declared(spec: str) -> tuple[ContextField, ...]:
    return context_fields(resolve_grader(spec))


class RewardPlan:
    """The reward components of each row (by ``data_source`` and routed grader), built from ``grading``."""

    def __init__(self, grading: GradingConfig) -> None:
        self.options: dict[str, dict[str, Any]] = grading.options
        self._global = grading.rewards
        self._by_source = grading.source_rewards
        self._terms: dict[tuple[str, str], tuple[RewardTerm, ...]] = {}

    @property
    def composed(self) -> bool:
        """Whether any row gets more than its own grader (samples then record each component)."""
        return bool(self._global or self._by_source)

    def terms(self, ex: Example) -> tuple[RewardTerm, ...]:
        key = (ex.data_source, ex.grader)
        terms = self._terms.get(key)
        if terms is None:
            configs: Sequence[RewardTermConfig] = self._by_source.get(ex.data_source) or self._global
            if not configs:
                terms = (RewardTerm(ex.grader, ex.grader, 1.0, self.options.get(ex.grader, {})),)
            else:
                terms = tuple(self._term(c, ex.grader) for c in configs)
            self._terms[key] = terms
        return terms

    def _term(self, c: RewardTermConfig, row_grader: str) -> RewardTerm:
        spec = c.grader or row_grader
        options = {**self.options.get(spec, {}), **c.options}
        return RewardTerm(c.label, spec, c.weight, options, fallback=c.fallback)

    def primary(self, ex: Example) -> RewardTerm:
        """The component whose verdict the sample carries (accuracy, pass@k, maj@k): the first."""
        return self.terms(ex)[0]

    def requests(
        self, ex: Example, response: str, context: GradeContext, key: Any, *, fallback: bool = False
    ) -> list[GradeRequest]:
        """One request per component, ids ``(key, component index)``: the first-opinion components, or with
        ``fallback`` the fallback ones (asked only once the first component found no answer)."""
        return [
            GradeRequest(t.grader, response, ex.ground_truth, t.options, id=(key, i), context=context)
            for i, t in enumerate(self.terms(ex))
            if t.fallback == fallback
        ]

    def combine(self, ex: Example, grades: Sequence[Grade | None]) -> tuple[Grade, ComposedReward | None]:
        """The sample's grade, and its composition when the run composes rewards (None: a fallback not asked)."""
        if not self.composed:
            first = grades[0]
            if first is None:
                raise RuntimeError(f"example {ex.uid!r}: no grade")
            return first, None
        result = compose(self.terms(ex), grades)
        return result.grade, result

    def graders(self, examples: Iterable[Example]) -> set[str]:
        """Every grader spec these rows are judged by (selftest, governance)."""
        return {t.grader for ex in examples for t in self.terms(ex)}

    def check(self, examples: Iterable[Example]) -> None:
        """DataError for a component grader that cannot be loaded, or a row lacking a context field one of
        its graders declares (naming the field and the row): before step 1, not as masked samples."""
        for ex in examples:
            context = example_context(ex)
            for term in self.terms(ex):
                try:
                    fields = _declared(term.grader)
                except Exception as exc:  # an unloadable grader is one config mistake, named once
                    raise DataError(
                        f"reward component {term.name!r}: grader {term.grader!r} cannot be loaded: {exc}"
                    ) from None
                missing = [name for name in fields if getattr(context, name) is None]
                if missing:
                    raise DataError(
                        f"example {ex.uid!r} ({ex.data_source}): grader {term.grader!r} needs context field "
                        f"{missing[0]!r}, which this row does not have"
                    )


class StreamGrading:
    """The grading side of a collect: every reward component of ``rewards`` for each completion, with its row
    as context, submitted as the completion arrives; then the stragglers, and the combined grade per sample.
    Single-turn and tool rollouts feed it the same way (``take``), so both grade the same way."""

    def __init__(
        self, pool: GradingPool, prompts: Sequence[Prompt] | Mapping[int, Prompt], rewards: RewardPlan
    ) -> None:
        self.pool = pool
        self.prompts = prompts
        self.rewards = rewards
        self.completions: dict[Key, Completion] = {}
        self._parts: dict[Key, list[Grade | None]] = {}
        self._pending: dict[Key, int] = {}  # requests of the sample not yet answered
        self._contexts: dict[int, GradeContext] = {}
        self._failed: set[Key] = set()
        self.ever_graded = 0  # samples whose every component came back, since this stream began (progress)

    def take(self, comp: Completion) -> None:
        """One finished completion, from whichever producer: graded at once, or (``comp.error``: our
        infrastructure ruined it) given an ``error`` grade and never sent to the graders."""
        key = (comp.prompt_index, comp.sample_index)
        if comp.error:
            self.fail(key, comp, Grade.error(f"rollout infrastructure: {comp.error}"))
        else:
            self.submit(key, comp)

    def submit(self, key: Key, comp: Completion) -> None:
        self.completions[key] = comp
        ex = self.prompts[key[0]].example
        if key[0] not in self._contexts:
            self._contexts[key[0]] = example_context(ex)
        requests = self.rewards.requests(ex, comp.text, self._contexts[key[0]], key)
        self._parts[key] = [None] * len(self.rewards.terms(ex))
        self._pending[key] = len(requests)
        for req in requests:
            self.pool.submit(req)
        self._take(self.pool.poll(0.0))

    def fail(self, key: Key, comp: Completion, grade: Grade) -> None:
        """A sample not sent to the graders (e.g. a tool rollout our infrastructure ruined): ``grade`` stands."""
        self.completions[key] = comp
        self._parts[key] = [grade]
        self._pending[key] = 0
        self._failed.add(key)
        self.ever_graded += 1

    def graded(self) -> int:
        return sum(1 for left in self._pending.values() if not left)

    def poll(self, timeout: float | None) -> int:
        """Take the grades that landed, waiting up to ``timeout`` s for the first (None: until one lands, if
        any is outstanding), and count them: a producer that judges groups as they finish (dynamic sampling)
        needs them early."""
        landed = self.pool.poll(timeout)
        self._take(landed)
        return len(landed)

    def group(self, prompt: int, n: int) -> list[Sample] | None:
        """Prompt key ``prompt``'s ``n`` samples as group 0, left in place, or None until every one is graded."""
        keys = [(prompt, j) for j in range(n)]
        if any(k not in self._pending or self._pending[k] for k in keys):
            return None
        return [self._sample(k, 0, self._parts[k]) for k in keys]

    def wait(self, progress: Callable[[], None] | None = None) -> None:
        """The stragglers, until a round brings nothing (a fallback asked meanwhile is one more round);
        ``progress`` is called as each grade lands (the heartbeat's graded count)."""
        landed = True
        while landed:
            landed = False
            for finished in self.pool.results():
                landed = True
                self._take([finished])
                if progress is not None:
                    progress()

    def _take(self, finished: list[tuple[Any, Grade]]) -> None:
        for req, grade in finished:
            key, component = req.id
            self._parts[key][component] = grade
            self._pending[key] -= 1
            if component == 0 and no_answer(grade):
                self._ask_fallback(key, req)
            if not self._pending[key]:
                self.ever_graded += 1

    def _ask_fallback(self, key: Key, first: GradeRequest) -> None:
        """The first component found no answer: submit the row's fallback components, if any."""
        ex = self.prompts[key[0]].example
        assert first.context is not None  # every request of a sample carries its row
        requests = self.rewards.requests(ex, first.response, first.context, key, fallback=True)
        self._pending[key] += len(requests)
        for req in requests:
            self.pool.submit(req)

    def rollouts(self, group_offset: int) -> Rollouts:
        grades = {k: got for k, got in self._parts.items() if not self._pending[k]}
        missing = set(self.completions) - set(grades)
        if missing:
            raise RuntimeError(
                f"grading pool returned no grade for {len(missing)} samples (e.g. {min(missing)})"
            )
        return Rollouts([self._sample(k, group_offset + k[0], grades[k]) for k in sorted(self.completions)])

    def pop_groups(self, groups: Sequence[int]) -> Rollouts:
        """Continuous rollouts (``trainer/frontier``): the graded samples of these prompt keys, group ``k`` for
        ``groups[k]``, forgotten here (the other keys stay for a later step). Call after ``wait``."""
        keys = sorted(
            (k for k in self.completions if k[0] in set(groups)), key=lambda k: (groups.index(k[0]), k[1])
        )
        samples = []
        for k in keys:
            grades = self._parts.pop(k)
            if self._pending.pop(k):
                raise RuntimeError(f"grading pool returned no grade for sample {k}")
            samples.append(self._sample(k, groups.index(k[0]), grades))
            del self.completions[k]
            self._failed.discard(k)
        for g in groups:
            self._contexts.pop(g, None)
        return Rollouts(samples)

    def _sample(self, k: Key, group: int, grades: list[Grade | None]) -> Sample:
        ex = self.prompts[k[0]].example
        if k in self._failed:
            grade, composed = _first(grades), None
        else:
            grade, composed = self.rewards.combine(ex, grades)
        return Sample(group, ex, self.completions[k], grade, composed)

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


def _first(grades: list[Grade | None]) -> Grade:
    if grades[0] is None:
        raise RuntimeError("a failed sample carries no grade")
    return grades[0]
