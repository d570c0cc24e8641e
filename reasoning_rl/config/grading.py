"""The grading runtime as a run configures it: reward terms and the grading section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from graders.runtime import function_spec
from reasoning_rl.config.base import _Section


class RewardTermConfig(_Section):
    """One component of a composed reward (``grading.rewards``)."""

    grader: str | None = Field(
        default=None,
        description="Grader name or module:Class; omitted: the row's own grader (data.grader_map / "
        "data_source default / data.default_grader).",
    )
    weight: float = Field(default=1.0, allow_inf_nan=False, description="Its score's weight in the reward.")
    name: str | None = Field(
        default=None,
        description="Metric name (reward/<name>/mean); default: the grader's name, 'answer' when omitted.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Grade options over grading.options of its grader."
    )
    fallback: bool = Field(
        default=False,
        description="Ask this grader only when the first component found no answer (e.g. a `judge` behind "
        "`math`); its grade then stands in for the first one's (docs/rewards.md).",
    )
    function: str | None = Field(
        default=None,
        description="module:fn of a TRL reward function or a verl compute_score, called unchanged instead of "
        "a grader (options: range, threshold, conversational, on_raise; docs/from-trl-and-verl.md).",
    )

    @model_validator(mode="before")
    @classmethod
    def _function_is_its_grader(cls, data: Any) -> Any:
        """A function component is a grader component whose grader is the function's adapter spec
        (``function=module:fn``): one path through the runtime for both."""
        if not isinstance(data, dict) or data.get("function") is None:
            return data
        target = data["function"]
        if not isinstance(target, str):
            raise ValueError(f"function must be a 'module:fn' string, got {target!r}")
        spec = function_spec(target)
        if data.get("grader") not in (None, spec):
            raise ValueError("give either `grader` or `function`, not both")
        return {**data, "grader": spec}

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.function:
            return self.function.rpartition(":")[2].rpartition(".")[2]
        return self.grader or "answer"


def _unique_labels(terms: list[RewardTermConfig], where: str) -> list[RewardTermConfig]:
    labels = [t.label for t in terms]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise ValueError(f"{where}: component name(s) {twice} appear twice; give each a distinct `name`")
    if terms and terms[0].fallback:
        raise ValueError(
            f"{where}: the first component cannot be a fallback (it is the one a fallback backs)"
        )
    return terms


class GradingConfig(_Section):
    workers: int = Field(default=2, ge=1, description="Grading worker processes (or Ray actors).")
    backend: Literal["auto", "process", "ray"] = Field(
        default="auto",
        description="Where graders run; auto: Ray when ray_address or RAY_ADDRESS is set or Ray is running, else local processes.",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster for the grading workers (backend ray/auto)."
    )
    timeout_s: float = Field(
        default=10.0, gt=0.0, description="Hard budget per grade; a grade killed at it is an error (masked)."
    )
    retries: int = Field(
        default=1,
        ge=0,
        description="Extra attempts after a worker failure (crash, bad result); timeouts are not retried.",
    )
    cache: bool = Field(
        default=True,
        description="Cache grades in run_dir/grades.sqlite, keyed by grader source, response and truth.",
    )
    max_in_flight: int = Field(
        default=256, ge=1, description="Most streamed samples queued or being graded at once (back-pressure)."
    )
    options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="grader name -> grade options."
    )
    selftest: bool = Field(
        default=True,
        description="Run the golden cases of the graders this run uses before "
        "step 1 (`rrl graders selftest`); a disagreement stops the run.",
    )
    warn_error_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Warn when more than this share of a step's samples are grader errors (masked, untrained); "
        "a step with no judged sample at all stops the run.",
    )
    rewards: list[RewardTermConfig] = Field(
        default_factory=list,
        description="Composed reward for every row: [{grader, weight, options, name}, ...], reward = "
        "sum of weight x score, an error in any component masks the sample; the first component is the "
        "verdict accuracy/pass@k count. Empty: the row's grader alone (docs/rewards.md).",
    )
    source_rewards: dict[str, list[RewardTermConfig]] = Field(
        default_factory=dict,
        description="data_source -> its own composed reward (replaces grading.rewards for those rows).",
    )

    @field_validator("rewards")
    @classmethod
    def _rewards_unique(cls, v: list[RewardTermConfig]) -> list[RewardTermConfig]:
        return _unique_labels(v, "grading.rewards")

    @field_validator("source_rewards")
    @classmethod
    def _source_rewards_unique(
        cls, v: dict[str, list[RewardTermConfig]]
    ) -> dict[str, list[RewardTermConfig]]:
        for source, terms in v.items():
            if not terms:
                raise ValueError(f"grading.source_rewards.{source}: give at least one component")
            _unique_labels(terms, f"grading.source_rewards.{source}")
        return v
