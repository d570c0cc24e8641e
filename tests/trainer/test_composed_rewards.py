"""Composed rewards (issue 19): the verdict stays sound, the reward is the weighted sum, components are metrics."""

from __future__ import annotations

import math

import pytest
import torch

import graders
from graders.compose import RewardTerm, compose
from graders.runtime import GradingPool
from graders.selftest import run_selftests
from graders.types import Grade
from reasoning_rl.config import GradingConfig, OverlongConfig
from reasoning_rl.data import DataError, Example
from reasoning_rl.rollout import Completion
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.records import Sample
from reasoning_rl.trainer.rewards import informative_groups, rewards_and_mask, sample_metrics

TERMS = (RewardTerm("math", "math", 1.0), RewardTerm("format", "format", 0.1))


def test_weighted_sum_and_first_components_verdict() -> None:
    got = compose(TERMS, [Grade.incorrect("wrong"), Grade.correct("boxed")])
    assert got.grade.verdict == "incorrect" and got.reward == pytest.approx(0.1)
    assert got.scores() == {"math": 0.0, "format": 1.0}
    assert got.row()["rewards"]["format"] == {
        "weight": 0.1,
        "score": 1.0,
        "verdict": "correct",
        "reason": "boxed",
    }


def test_an_error_in_any_component_masks_the_sample_never_a_fake_zero() -> None:
    got = compose(TERMS, [Grade.correct(), Grade.error("timeout: no grade within 10s")])
    assert got.grade.verdict == "error" and got.grade.details["component"] == "format"
    assert got.grade.reason.startswith("timeout")  # error_reason metrics still bucket by cause
    with pytest.raises(ValueError, match="one grade per term"):
        compose(TERMS, [Grade.correct()])


def example(source: str = "s", grader: str = "math", extra: dict | None = None) -> Example:
    return Example("u1", source, ({"role": "user", "content": "q"},), "1", grader, extra)


def test_plan_resolves_global_and_per_source_terms_and_options() -> None:
    cfg = GradingConfig.model_validate(
        {
            "options": {"math": {"mode": "lenient"}, "format": {"style": "boxed"}},
            "rewards": [{"weight": 1.0}, {"grader": "format", "weight": 0.1}],
            "source_rewards": {
                "openai/gsm8k": [{}, {"grader": "format", "weight": 0.2, "options": {"style": "gsm8k"}}]
            },
        }
    )
    plan = RewardPlan(cfg)
    terms = plan.terms(example())
    assert [(t.name, t.grader, t.weight, t.options) for t in terms] == [
        ("answer", "math", 1.0, {"mode": "lenient"}),
        ("format", "format", 0.1, {"style": "boxed"}),
    ]
    gsm = plan.terms(example("openai/gsm8k", "gsm8k"))
    assert [(t.grader, t.options) for t in gsm] == [("gsm8k", {}), ("format", {"style": "gsm8k"})]
    assert plan.graders([example(), example("openai/gsm8k", "gsm8k")]) == {"math", "gsm8k", "format"}
    single = RewardPlan(GradingConfig(options={"math": {"mode": "lenient"}}))
    assert not single.composed and [t.options for t in single.terms(example())] == [{"mode": "lenient"}]


def test_config_refuses_duplicate_component_names() -> None:
    with pytest.raises(ValueError, match="appear twice"):
        GradingConfig.model_validate({"rewards": [{"grader": "format"}, {"grader": "format", "weight": 0.5}]})
    GradingConfig.model_validate({"rewards": [{"grader": "format"}, {"grader": "format", "name": "f2"}]})
    with pytest.raises(ValueError):
        GradingConfig.model_validate({"rewards": [{"grader": "format", "weight": float("nan")}]})


def test_check_names_the_missing_context_field_and_row() -> None:
    plan = RewardPlan(
        GradingConfig.model_validate({"rewards": [{"grader": "task_graders:TargetFromContext"}]})
    )
    plan.check([example(extra={"target": 1})])
    with pytest.raises(DataError, match=r"example 'u1' \(s\).*'extra_info'"):
        plan.check([example()])
    with pytest.raises(DataError, match="cannot be loaded"):
        RewardPlan(GradingConfig.model_validate({"rewards": [{"grader": "nope_grader"}]})).check([example()])


def sample(group: int, grades: list[Grade]) -> Sample:
    composed = compose(TERMS, grades)
    comp = Completion(group, 0, [1], [1, 2], [0.0, 0.0], "x", "stop")
    return Sample(group, example(), comp, composed.grade, composed)


def test_rewards_mask_and_component_metrics_use_the_composition() -> None:
    samples = [
        sample(0, [Grade.correct(), Grade.correct()]),  # 1.1
        sample(0, [Grade.incorrect(), Grade.correct()]),  # 0.1
        sample(1, [Grade.correct(), Grade.error("sandbox_failure")]),  # masked
        sample(1, [Grade.incorrect(), Grade.incorrect()]),  # 0.0
    ]
    rewards, mask = rewards_and_mask(samples, max_tokens=8, overlong=OverlongConfig())
    assert mask.tolist() == [True, True, False, True]
    assert rewards[mask].tolist() == pytest.approx([1.1, 0.1, 0.0])
    out = sample_metrics(samples, rewards, mask)
    assert out["reward/math/mean"] == pytest.approx(1 / 3) and out["reward/format/mean"] == pytest.approx(
        2 / 3
    )
    assert out["reward/mean"] == pytest.approx(
        1.0 * out["reward/math/mean"] + 0.1 * out["reward/format/mean"]
    )
    assert out["grading/error"] == 1.0 and out["reward/accuracy"] == pytest.approx(1 / 3)
    assert informative_groups(samples) == {0}  # group 1: one judged sample left
    assert not math.isnan(float(torch.tensor(out["reward/std"])))


def test_format_and_length_graders_pass_their_golden_cases() -> None:
    assert {"format", "length"} <= set(graders.available())
    with GradingPool(workers=1, backend="process", timeout_s=10) as pool:
        fmt, length = run_selftests(["format", "length"], pool)
    assert fmt.cases >= 5 and fmt.ok, fmt.disagreements
    assert length.cases == 3 and length.ok, length.disagreements


def test_a_length_penalty_is_a_negative_weight_on_the_length_grader() -> None:
    terms = (RewardTerm("answer", "math", 1.0), RewardTerm("length", "length", -0.5, {"max_chars": 10}))
    grades = [
        graders.grade("math", "\\boxed{1}", "1"),
        graders.grade("length", "\\boxed{1}", None, max_chars=10),
    ]
    got = compose(terms, grades)
    assert grades[1].score == pytest.approx(0.9) and got.reward == pytest.approx(1.0 - 0.45)
    assert got.grade.verdict == "correct"


def test_extra_info_must_be_an_object_and_absent_is_none() -> None:
    from reasoning_rl.config import RowConfig
    from reasoning_rl.data import normalize_row

    def norm(row: dict) -> Example:
        return normalize_row(row, where="f.jsonl:row 3", uid="u", default_source="s", rules=RowConfig())

    assert norm({"question": "q", "answer": "1"}).extra_info is None  # a grader asking for it is refused
    assert norm({"question": "q", "answer": "1", "extra_info": {"a": 1}}).extra_info == {"a": 1}
    with pytest.raises(DataError, match=r"f.jsonl:row 3: 'extra_info' must be an object"):
        norm({"question": "q", "answer": "1", "extra_info": "text"})


def test_verdicts_are_counted_under_the_component_that_judged_not_the_rows_grader() -> None:
    """Issue 47 follow-up: `grading/<grader>/<verdict>` (and each sample's `grader`) named the row's routed grader
    (`math`) even when `{function: module:fn}` components judged every sample: each verdict is now counted
    under the component it came from (the first; the one that erred; a fallback that answered for the first)."""
    from reasoning_rl.trainer.governance import identity_fields
    from reasoning_rl.trainer.rewards import verdict_grader

    fn = "function=examples.verl_compute_score.compute_score:compute_score"
    terms = (RewardTerm("compute_score", fn, 1.0), RewardTerm("format", "format", 0.1))
    fallback = (RewardTerm("answer", "math", 1.0), RewardTerm("judge", fn, 1.0, fallback=True))

    def judged(ts: tuple[RewardTerm, ...], grades: list[Grade | None]) -> Sample:
        composed = compose(ts, grades)
        comp = Completion(0, 0, [1], [1, 2], [0.0, 0.0], "x", "stop")
        return Sample(0, example(grader="math"), comp, composed.grade, composed)

    samples = [
        judged(terms, [Grade.correct(), Grade.incorrect()]),
        judged(terms, [Grade.incorrect(), Grade.correct()]),
        judged(terms, [Grade.correct(), Grade.error("format broke")]),  # the format component erred
        judged(fallback, [Grade.incorrect("no answer found", no_answer=True), Grade.correct()]),
        judged(fallback, [Grade.correct(), None]),  # the first answered: the fallback was not asked
    ]
    assert [verdict_grader(s) for s in samples] == [fn, fn, "format", fn, "math"]
    rewards, mask = rewards_and_mask(samples, max_tokens=8, overlong=OverlongConfig())
    out = sample_metrics(samples, rewards, mask)
    key = "grading/examples.verl_compute_score.compute_score:compute_score"
    assert out[f"{key}/correct"] == 2 and out[f"{key}/incorrect"] == 1
    assert out["grading/format/error"] == 1 and out["grading/math/correct"] == 1
    assert "grading/math/incorrect" not in out and "grading/math/error" not in out
    # a sample row's `grader` / `grader_version` (samples/step_N.jsonl): the function, by its own name
    assert identity_fields(verdict_grader(samples[0])) == {"grader": "compute_score", "grader_version": "1"}
