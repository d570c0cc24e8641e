"""Grader row context (issue 19): declared fields only, through the process pool, the cache key and rrl grade."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import context_test_graders as cg
import pytest
from typer.testing import CliRunner

import graders
from graders.runtime import GradeRequest, GradingPool
from graders.runtime.request import cache_key
from graders.types import ContextError, GradeContext, context_fields

SEES = f"{cg.__name__}:SeesContext"
NONE = f"{cg.__name__}:NoContext"
CTX = GradeContext.from_messages(
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Say 7"}],
    data_source="digits",
    extra_info={"target": 7},
    row_id="r1",
)


@pytest.fixture(scope="module")
def pool() -> GradingPool:
    with GradingPool(workers=1, backend="process", timeout_s=10.0) as p:
        yield p


def test_context_derives_the_prompt_and_pickles() -> None:
    assert CTX.prompt == "Say 7" and CTX.messages is not None and len(CTX.messages) == 2
    assert pickle.loads(pickle.dumps(CTX)) == CTX  # it crosses to process workers and Ray actors
    assert GradeContext.from_messages("plain text").messages == ({"role": "user", "content": "plain text"},)


def test_a_grader_gets_exactly_the_fields_it_declares(pool: GradingPool) -> None:
    seen_grade, plain = pool.grade_batch(
        [GradeRequest(SEES, "it is 7", None, context=CTX), GradeRequest(NONE, "x", None, context=CTX)]
    )
    assert seen_grade.verdict == "correct"
    seen = seen_grade.details["seen"]
    assert seen["prompt"] == "Say 7" and seen["extra_info"] == {"target": 7}
    assert seen["messages"] is None and seen["data_source"] is None and seen["row_id"] is None
    assert plain.verdict == "correct" and plain.details["options"] == []  # no context keyword at all


def test_a_missing_declared_field_is_an_error_naming_field_and_row(pool: GradingPool) -> None:
    lacking = GradeContext.from_messages("Say 7", row_id="row-9")  # no extra_info
    (grade, no_ctx) = pool.grade_batch(
        [GradeRequest(SEES, "7", None, context=lacking), GradeRequest(SEES, "7", None, id="q")]
    )
    assert grade.verdict == "error" and "'extra_info'" in grade.reason and "'row-9'" in grade.reason
    assert no_ctx.verdict == "error" and "carries no context" in no_ctx.reason


def test_cache_key_covers_declared_fields_only() -> None:
    fields = context_fields(cg.SeesContext())
    req = GradeRequest(SEES, "7", None, context=CTX)
    key = cache_key("sees_context", "1", req, CTX.only(fields), fields)
    other_source = GradeContext.from_messages(
        "Say 7", data_source="another", extra_info={"target": 7}, row_id="z"
    )
    assert cache_key("sees_context", "1", req, other_source.only(fields), fields) == key  # unused columns
    changed = GradeContext.from_messages("Say 7", extra_info={"target": 8}, row_id="r1")
    assert cache_key("sees_context", "1", req, changed.only(fields), fields) != key  # a used one
    # a grader declaring nothing keeps the key it had before contexts existed (old caches stay valid)
    plain = GradeRequest(NONE, "7", None)
    assert cache_key("no_context", "1", GradeRequest(NONE, "7", None, context=CTX)) == cache_key(
        "no_context", "1", plain
    )


def test_pool_cache_replays_across_unused_columns_and_regrades_on_used_ones(tmp_path: Path) -> None:
    def hits(p: GradingPool) -> int:
        return int(p.metrics()["graders"]["sees_context"]["cache_hits"])

    with GradingPool(workers=1, backend="process", cache_path=tmp_path / "c.sqlite") as p:
        p.grade_batch([GradeRequest(SEES, "7", None, context=CTX)])
        p._cache.flush()  # type: ignore[union-attr]
        other = GradeContext.from_messages("Say 7", data_source="x", extra_info={"target": 7}, row_id="other")
        p.grade_batch([GradeRequest(SEES, "7", None, context=other)])
        assert hits(p) == 1
        used = GradeContext.from_messages("Say 7", extra_info={"target": 8}, row_id="r1")
        assert p.grade_batch([GradeRequest(SEES, "7", None, context=used)])[0].verdict == "incorrect"
        assert hits(p) == 1


def test_unknown_declared_field_fails_at_load() -> None:
    class Typo:
        name, version, context_fields = "typo", "1", ("extra_infos",)

    with pytest.raises(TypeError, match="extra_infos"):
        context_fields(Typo())


def test_in_process_grade_passes_the_declared_context() -> None:
    graders.register(cg.SeesContext(), replace=True)
    try:
        assert graders.grade("sees_context", "7", None, context=CTX).verdict == "correct"
        with pytest.raises(ContextError, match="context"):
            graders.grade("sees_context", "7", None)
    finally:
        graders.unregister("sees_context")


def test_rrl_grade_gives_context_graders_the_rows_columns(tmp_path: Path) -> None:
    from reasoning_rl.cli.app import app

    rows = [
        {
            "prompt": [{"role": "user", "content": "Say 3"}],
            "extra_info": {"target": 3},
            "response": "3",
            "ground_truth": 0,
        },
        {"question": "Say 4", "extra_info": {"target": 5}, "response": "4", "ground_truth": 0},
        {"id": "no-extra", "question": "Say 4", "response": "4", "ground_truth": 0},
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    args = ["grade", str(src), "-o", str(out), "--grader", SEES, "--workers", "1", "--no-progress"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["verdict"] for line in lines] == ["correct", "incorrect", "error"]
    assert lines[0]["grades"][0]["details"]["seen"]["prompt"] == "Say 3"
    assert lines[1]["grades"][0]["details"]["seen"]["prompt"] == "Say 4"  # question column
    assert (
        "'extra_info'" in lines[2]["reason"]
        and "row 3" in lines[2]["reason"]
        and "no-extra" in lines[2]["reason"]
    )


def test_regrade_passes_the_stored_rows_context(tmp_path: Path) -> None:
    from graders.evaluation.regrade import regrade

    rows = [{"id": "a", "question": "Say 3", "extra_info": {"target": 3}, "response": "3", "ground_truth": 0}]
    src, out = tmp_path / "rows.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    from reasoning_rl.cli.app import app

    args = ["grade", str(src), "-o", str(out), "--grader", SEES, "--workers", "1", "--no-progress"]
    assert CliRunner().invoke(app, args).exit_code == 0
    with GradingPool(workers=1, backend="process") as p:
        report = regrade(out, p, allowed=frozenset({SEES}))  # named again, as `--grader` does
    assert report.flipped == 0 and not report.skipped  # before: every grade became missing_context


def test_golden_cases_carry_a_context(pool: GradingPool) -> None:
    """Before: a context grader's cases had no context, so each was an error and its selftest stopped the run."""
    from graders.selftest import SelftestError, run_selftests

    (result,) = run_selftests([SEES], pool)
    assert result.cases == 2 and result.ok, [d.describe() for d in result.disagreements]
    from graders.selftest import GoldenCase

    with pytest.raises(SelftestError, match="unknown: prompts"):
        GoldenCase.parse(
            {"response": "", "ground_truth": 1, "verdict": "correct", "context": {"prompts": 1}}, "w"
        )
