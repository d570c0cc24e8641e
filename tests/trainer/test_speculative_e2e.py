"""rrl train with rollout.speculative.method=group (issue 34): the trainer's synchronous step through the vLLM
frontier, prompts seen again in the second epoch draft from their first-epoch samples, every step's metrics
line carries vLLM's acceptance counters, the freshness gate and the log-prob check pass, and rrl report shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainer.test_train_e2e import config, metrics, train

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_group_speculation_trains_exactly_and_reports(tmp_path: Path, tiny_model_dir: Path) -> None:
    from reasoning_rl.report import analyze, load_run
    from reasoning_rl.report.html import render_html
    from reasoning_rl.report.plots import FIGURES
    from reasoning_rl.trace import read_trace

    cfg = config(
        tmp_path,
        tiny_model_dir,
        "spec",
        data={
            "train": {"generator": "fixed_digit", "size": 4}
        },  # one batch per epoch: step 2 sees them again
        rollout={"n": 2, "max_tokens": 24, "temperature": 0.0, "speculative": {"method": "group"}},
        trainer={"steps": 2, "batch_size": 4},
    )
    train(cfg)
    rows = [r for r in metrics(tmp_path / "spec") if "speculative/acceptance_rate" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["speculative/steps_per_token"] == pytest.approx(1.0)  # epoch 1: siblings run together
    assert rows[1]["speculative/acceptance_rate"] > 0.5 and rows[1]["speculative/steps_per_token"] < 0.6
    for r in rows:
        assert r["rollout/logprob_diff_max"] <= 1e-3 and r["handoff/probe_gap"] < 1e-4
    accepted = {
        c["step"]: c["value"]
        for c in read_trace(tmp_path / "spec" / "trace.jsonl").counters
        if c["name"] == "draft_accepted"
    }
    assert accepted[1] == 0 and accepted[2] == rows[1]["speculative/accepted_tokens"] > 0
    html = render_html(analyze(load_run(tmp_path / "spec")), dict.fromkeys(FIGURES), run_name="t", config={})
    assert "<h2>Speculative decoding</h2>" in html
