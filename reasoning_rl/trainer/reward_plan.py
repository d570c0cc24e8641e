"""Which graders judge a row and how their grades become its reward: ``grading.rewards`` (every row) or
``grading.source_rewards`` (per ``data_source``), else the row's own grader alone. The combination itself is
``graders.compose`` (one implementation for rollouts and evaluation); this module only resolves the config
per row and checks, before step 1, that each grader's declared context fields exist in every row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from typing import Any

from graders.compose import ComposedReward, RewardTerm, compose
from graders.runtime import GradeRequest, resolve_grader
from graders.types import ContextField, Grade, GradeContext, context_fields
from reasoning_rl.config import GradingConfig, RewardTermConfig
from reasoning_rl.data import DataError, Example


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
        return RewardTerm(c.label, spec, c.weight, {**self.options.get(spec, {}), **c.options})

    def primary(self, ex: Example) -> RewardTerm:
        """The component whose verdict the sample carries (accuracy, pass@k, maj@k): the first."""
        return self.terms(ex)[0]

    def requests(self, ex: Example, response: str, context: GradeContext, key: Any) -> list[GradeRequest]:
        """One request per component, ids ``(key, component index)``."""
        return [
            GradeRequest(t.grader, response, ex.ground_truth, t.options, id=(key, i), context=context)
            for i, t in enumerate(self.terms(ex))
        ]

    def combine(self, ex: Example, grades: Sequence[Grade]) -> tuple[Grade, ComposedReward | None]:
        """The sample's grade, and its composition when the run composes rewards."""
        if not self.composed:
            return grades[0], None
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
