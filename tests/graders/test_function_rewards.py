"""A TRL reward function or a verl compute_score used unchanged as a grader (issue 47): through the process pool as
a run grades, a bad result or a raise costs its row alone (one line naming the function and the row), the budget
and worker isolation hold, the cache follows the function's source, and the config names it as `function:`."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import function_test_rewards as fr
import pytest

import graders
from graders.functions import FunctionGrader, detect_style, function_spec
from graders.runtime import GradeRequest, GradingPool, resolve_grader
from graders.runtime.cache import _source_hash, cache_version
from graders.types import GradeContext
from reasoning_rl.config import Config

MOD = fr.__name__
CTX = GradeContext.from_messages(
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Say 7"}],
    data_source="digits",
    extra_info={"target": 7},
    row_id="digits:3",
)


def spec(name: str) -> str:
    return function_spec(f"{MOD}:{name}")


def request(name: str, response: str = "it is 7", truth: str = "7", **options: object) -> GradeRequest:
    return GradeRequest(spec(name), response, truth, dict(options), context=CTX)


@pytest.fixture(scope="module")
def pool() -> GradingPool:
    with GradingPool(workers=1, backend="process", timeout_s=2.0, retries=0) as p:
        yield p


def test_the_style_is_read_from_the_signature() -> None:
    assert detect_style(fr.contains_truth) == "trl" and detect_style(fr.verl_score) == "verl"
    assert detect_style(fr.verl_plain) == "verl"
    with pytest.raises(TypeError, match=r"neither a TRL reward function .* parameters: x, y"):
        detect_style(fr.neither)
    with pytest.raises(TypeError, match="neither"):
        resolve_grader(spec("neither"))


def test_trl_function_gets_the_row_as_columns_through_the_workers(pool: GradingPool) -> None:
    plain, columns, wrong, chat = pool.grade_batch(
        [
            request("contains_truth"),
            request("sees_columns"),
            request("contains_truth", response="it is 8"),
            request("sees_conversation", conversational=True),
        ]
    )
    assert (plain.verdict, plain.score, plain.reason) == ("correct", 1.0, "contains_truth returned 1")
    assert columns.verdict == "correct"  # prompts, completions and every column as one-element lists
    assert (wrong.verdict, wrong.score) == ("incorrect", 0.0)  # a 0 is a penalised response, not an error
    assert chat.verdict == "correct"


def test_verl_compute_score_gets_source_and_extra_info(pool: GradingPool) -> None:
    lacking = GradeContext.from_messages("Say 7", data_source="digits", row_id="digits:4")  # no extra_info
    full, none_extra, plain, acc = pool.grade_batch(
        [
            request("verl_score"),
            GradeRequest(spec("verl_score"), "7", "7", context=lacking),
            request("verl_plain", response="so 7"),
            request("verl_acc"),
        ]
    )
    assert full.verdict == "correct" and full.details == {
        "source": "digits",
        "extra": '{"target": 7}',
        "value": 1.0,
    }
    assert none_extra.verdict == "correct" and none_extra.details["extra"] == "null"  # verl's extra_info=None
    assert plain.verdict == "correct"  # called with only the parameters it takes
    assert (acc.verdict, acc.score) == ("correct", 0.2)  # a dict's `acc` is the verdict, `score` the reward


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("raises", "raised ValueError: cannot parse this completion"),
        ("two_values", "returned 2 values for 1 completion"),
        ("a_string", "returned str, not a list of floats"),
        ("a_word", "returned str 'yes', not a number"),
        ("not_applicable", "returned None"),
        ("not_a_number", "returned nan"),
        ("scaled", "returned 2, outside range [0, 1]"),
        ("verl_no_score", "returned a dict without 'score'"),
    ],
)
def test_a_bad_result_costs_its_row_alone_in_one_line(pool: GradingPool, name: str, why: str) -> None:
    good_before, bad, good_after = pool.grade_batch(
        [request("contains_truth"), request(name), request("contains_truth", response="7!")]
    )
    assert good_before.verdict == good_after.verdict == "correct"
    assert bad.verdict == "error" and bad.score == 0.0  # masked: never trained on as a fake 0
    assert bad.reason.startswith(f"function {name!r} (row 'digits:3') ") and why in bad.reason
    assert "\n" not in bad.reason


def test_on_raise_incorrect_penalises_instead(pool: GradingPool) -> None:
    (grade,) = pool.grade_batch([request("raises", on_raise="incorrect")])
    assert grade.verdict == "incorrect" and "raised ValueError" in grade.reason and grade.details["raised"]


def test_range_maps_the_value_and_threshold_sets_the_verdict(pool: GradingPool) -> None:
    right, wrong, empty, low_bar = pool.grade_batch(
        [
            request("scaled", range=[-1, 2]),
            request("scaled", response="it is 8", range=[-1, 2]),
            request("scaled", response="", range=[-1, 2]),
            request("scaled", response="it is 8", range=[-1, 2], threshold=0.5),
        ]
    )
    assert (right.verdict, right.score, right.details["value"]) == ("correct", 1.0, 2.0)
    assert (wrong.verdict, wrong.score) == ("incorrect", 0.5)
    assert (empty.verdict, empty.score) == ("incorrect", 0.0)
    assert low_bar.verdict == "correct"


def test_unknown_options_are_refused_by_name() -> None:
    g = resolve_grader(spec("contains_truth"))
    assert isinstance(g, FunctionGrader)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['rnage'\]"):
        g.check_options({"rnage": [0, 2]})
    with pytest.raises(ValueError, match="low < high"):
        g.check_options({"range": [1, 1]})
    assert g.grade("7", "7", rnage=1).verdict == "error"


def test_the_budget_and_the_worker_isolation_hold(pool: GradingPool) -> None:
    slow, dead, fine = pool.grade_batch(
        [request("sleeps"), request("kills_its_process"), request("contains_truth")]
    )
    assert slow.verdict == "error" and slow.reason.startswith("timeout")  # killed at grading.timeout_s
    assert dead.verdict == "error" and dead.reason.startswith("worker_lost")
    assert fine.verdict == "correct"


def test_in_process_from_function_and_graders_grade() -> None:
    def local(prompts, completions, **kwargs):
        return [0.25]

    g = graders.from_function(local)
    assert g.spec is None and g.style == "trl"  # a local function: no spec a worker could load
    assert g.grade("x", "y").score == 0.25
    assert graders.from_function(fr.verl_score).spec == spec("verl_score")
    graders.register(graders.from_function(fr.verl_score, name="verl_in_process"))
    try:
        got = graders.grade("verl_in_process", "7", "7", context=CTX)
        assert got.verdict == "correct" and got.details["source"] == "digits"
        assert graders.grade("verl_in_process", "7", "7").details["source"] is None  # no context: all None
    finally:
        graders.unregister("verl_in_process")


def test_the_cache_version_follows_the_function_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = tmp_path / "edited_reward.py"
    module.write_text("def score(prompts, completions, **kw):\n    return [1.0]\n")
    first = cache_version(graders.from_function(importlib.import_module("edited_reward").score))
    module.write_text("def score(prompts, completions, **kw):\n    return [0.0]  # changed\n")
    _source_hash.cache_clear()
    sys.modules.pop("edited_reward")
    second = cache_version(graders.from_function(importlib.import_module("edited_reward").score))
    assert first != second
    sys.modules.pop("edited_reward")


def test_the_config_names_a_function_as_a_grader_component() -> None:
    def load(*terms: dict[str, object]) -> Config:
        return Config.model_validate(
            {
                "model": {"path": "m"},
                "data": {"train": {"path": "d.jsonl"}},
                "grading": {"rewards": list(terms)},
            }
        )

    target = f"{MOD}:verl_score"
    term = load({"function": target}).grading.rewards[0]
    assert term.grader == function_spec(target) and term.label == "verl_score"
    again = Config.model_validate(load({"function": target}).model_dump())  # --print-config reloads
    assert again.grading.rewards[0].grader == term.grader
    with pytest.raises(ValueError, match="either `grader` or `function`"):
        load({"function": target, "grader": "math"})
    with pytest.raises(ValueError, match="'module:function'"):
        load({"function": "no_colon"})
    labels = [
        t.label for t in load({"function": target}, {"function": f"{MOD}:contains_truth"}).grading.rewards
    ]
    assert labels == ["verl_score", "contains_truth"]


def test_rrl_grade_takes_a_function_spec_and_rows_without_extra_info(tmp_path: Path) -> None:
    """`rrl grade --grader function=module:fn`: the optional fields reach the function where the row has them
    (None where it lacks one: never an error line), and a raise is that row's error line alone."""
    import json

    from typer.testing import CliRunner

    from reasoning_rl.cli.app import app

    rows = [
        {"id": "a", "data_source": "digits", "extra_info": {"k": 1}, "response": "7", "ground_truth": "7"},
        {"id": "b", "question": "Say 8", "response": "9", "ground_truth": "8"},
    ]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["grade", str(src), "-o", str(out), "--workers", "1", "--no-progress"]
    res = CliRunner().invoke(app, [*args, "--grader", spec("verl_score")])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["verdict"] for line in lines] == ["correct", "incorrect"]
    details = [line["grades"][0]["details"] for line in lines]
    assert (details[0]["source"], details[0]["extra"]) == ("digits", '{"k": 1}')
    assert (details[1]["source"], details[1]["extra"]) == (None, "null")
    out.unlink()
    res = CliRunner().invoke(app, [*args, "--grader", spec("raises")])
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["verdict"] for line in lines] == ["error", "error"]
    assert "function 'raises' (row 'a') raised ValueError" in lines[0]["grades"][0]["reason"]
