"""``rrl grade`` end to end: the acceptance math file (800 responses), bad rows, resume, report, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from rrl_testutil import shared_path
from typer.testing import CliRunner

import graders
from graders.evaluation.scoring import pass_at_k
from graders.runtime.procworker import FLUSH_S
from reasoning_rl.cli.app import app

runner = CliRunner()


@pytest.fixture(scope="module")
def acceptance_rows() -> list[dict]:
    path = shared_path("acceptance", "math", "qwen25math_cot_100.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _convert(rows: list[dict], dest: Path) -> Path:
    """The acceptance file in our schema: `code` holds the 8 responses, `gt` the answer."""
    with dest.open("w") as fh:
        for r in rows:
            fh.write(
                json.dumps(
                    {
                        "id": r["idx"],
                        "responses": r["code"],
                        "ground_truth": r["gt"],
                        "data_source": r["level"],
                        "level": r["level"],
                    }
                )
                + "\n"
            )
    return dest


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_grade_acceptance_math_pass_and_maj_at_8(acceptance_rows: list[dict], tmp_path: Path) -> None:
    src = _convert(acceptance_rows, tmp_path / "in.jsonl")
    out, report, summary = tmp_path / "out.jsonl", tmp_path / "report.html", tmp_path / "summary.json"
    res = runner.invoke(
        app,
        [
            "grade",
            str(src),
            "-o",
            str(out),
            "--grader",
            "math",
            "--workers",
            "2",
            "--report",
            str(report),
            "--summary-json",
            str(summary),
            "--no-progress",
        ],
    )
    assert res.exit_code == 0, res.output
    lines = _lines(out)
    assert len(lines) == 100 and sum(len(line["grades"]) for line in lines) == 800
    assert {line["id"] for line in lines} == {r["idx"] for r in acceptance_rows}
    assert all(line["grader"] == "math" and line["grader_version"] for line in lines)
    overall = json.loads(summary.read_text())["summary"]["overall"]

    # Independent 1: the dataset's own labels (its `score` per response).
    labels_pass8 = sum(any(r["score"]) for r in acceptance_rows) / 100
    assert overall["pass@8"] == pytest.approx(labels_pass8, abs=0.02)

    # Independent 2: grade in-process with the math grader, no pool, and vote here: an answer joins the first
    # earlier answer the grader judges equal to it (greedy clusters; rrl grade merges all pairs).
    direct_pass = direct_maj = 0
    for r in acceptance_rows:
        grades = [graders.grade("math", resp, r["gt"]) for resp in r["code"]]
        correct = [g.verdict == "correct" for g in grades]
        direct_pass += any(correct)
        answers = [tuple(g.details.get("extracted") or ()) or None for g in grades]
        reps: list[int] = []  # first response of each cluster
        cluster: list[int | None] = []
        for i, a in enumerate(answers):
            if a is None:
                cluster.append(None)
                continue
            same = next((j for j in reps if answers[j] == a), None)
            if same is None and len(a) == 1:
                same = next(
                    (
                        j
                        for j in reps
                        if len(answers[j] or ()) == 1
                        and graders.grade("math", r["code"][i], answers[j][0]).verdict == "correct"  # type: ignore[index]
                    ),
                    None,
                )
            if same is None:
                reps.append(i)
                same = i
            cluster.append(same)
        votes = Counter(c for c in cluster if c is not None)
        if votes:
            top = max(votes.values())
            winner = next(c for c in cluster if c is not None and votes[c] == top)
            direct_maj += any(ok for ok, c in zip(correct, cluster, strict=True) if c == winner)
    assert overall["pass@8"] == pytest.approx(direct_pass / 100)
    assert overall["maj@8"] == pytest.approx(direct_maj / 100)
    assert overall["pass@1"] == pytest.approx(overall["mean_score"])
    assert "pass@8" in res.output and "maj@8" in res.output
    page = report.read_text()
    assert "maj@8" in page and page.count("data:image/png;base64,") == 2


def test_pass_at_k_estimator() -> None:
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 2, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)


def test_bad_rows_become_error_lines_and_resume_skips_done_rows(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        "\n".join(
            [
                json.dumps(
                    {"id": "a", "response": "\\boxed{4}", "ground_truth": "4", "grader": "math", "score": 7}
                ),
                "{not json",
                json.dumps({"id": "b", "response": "\\boxed{5}"}),
                json.dumps(
                    {
                        "id": "c",
                        "responses": ["\\boxed{1}", "\\boxed{2}"],
                        "ground_truth": "2",
                        "data_source": "toy",
                        "extra": {"keep": True},
                    }
                ),
                json.dumps({"id": "d", "response": "x", "ground_truth": "1", "grader": "nope"}),
            ]
        )
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    args = [
        "grade",
        str(src),
        "-o",
        str(out),
        "--source-grader",
        "toy=math",
        "--no-progress",
        "--workers",
        "1",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    by_row = {line["row"]: line for line in _lines(out)}
    assert sorted(by_row) == [1, 2, 3, 4, 5]  # nothing dropped
    assert by_row[1]["verdict"] == "correct" and by_row[1]["input_score"] == 7  # input field kept, renamed
    assert (
        by_row[2]["verdict"] == "error"
        and "row 2" in by_row[2]["reason"]
        and "not valid JSON" in by_row[2]["reason"]
    )
    assert by_row[2]["raw"] == "{not json"
    assert "ground_truth" in by_row[3]["reason"] and by_row[3]["reason"].startswith("malformed_row: row 3")
    assert by_row[4]["k"] == 2 and by_row[4]["n_correct"] == 1 and by_row[4]["pass"] is True
    assert by_row[4]["extra"] == {"keep": True} and by_row[4]["grader"] == "math"
    assert "unknown grader 'nope'" in by_row[5]["reason"]
    assert "malformed" in res.output

    # A torn last line (crash mid-write) is cut off and that row graded again; the others are skipped.
    text = out.read_text().splitlines(keepends=True)
    out.write_text("".join(text[:-1]) + text[-1][: len(text[-1]) // 2])
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert sorted(line["row"] for line in _lines(out)) == [1, 2, 3, 4, 5]
    assert "4 already done" in res.output


def test_missing_input_is_a_clear_error(tmp_path: Path) -> None:
    res = runner.invoke(app, ["grade", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 2 and "does not exist" in res.output


def test_parquet_and_hf_dataset_inputs(tmp_path: Path) -> None:
    rows = [{"id": i, "response": f"\\boxed{{{i}}}", "ground_truth": "1", "grader": "math"} for i in range(3)]
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "hf"))
    for src in (tmp_path / "in.parquet", tmp_path / "hf"):
        out = tmp_path / f"{src.name}.out.jsonl"
        res = runner.invoke(app, ["grade", str(src), "-o", str(out), "--no-progress", "--no-cache"])
        assert res.exit_code == 0, res.output
        assert sorted((line["id"], line["verdict"]) for line in _lines(out)) == [
            (0, "incorrect"),
            (1, "correct"),
            (2, "incorrect"),
        ]


@pytest.mark.slow
def test_ctrl_c_keeps_finished_rows_and_rerun_resumes(tmp_path: Path) -> None:
    rows, gate = 20, tmp_path / "gate"
    src = tmp_path / "in.jsonl"
    spec = "runtime_test_graders:EchoGrader"
    src.write_text(
        "".join(json.dumps({"id": i, "response": str(i), "ground_truth": str(i)}) + "\n" for i in range(rows))
    )
    out = tmp_path / "out.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent / "graders"), *sys.path]))
    # Rows from id 5 on wait for the gate file (within a budget no loaded machine reaches), so the run is still
    # going when Ctrl-C arrives however fast or slow the machine is; the gate opens only for the rerun. Each grade
    # sleeps longer than the worker's FLUSH_S, so each result is sent back on its own, never held with the
    # blocked one's batch: ids 0-4 are written before the signal.
    cmd = [
        sys.executable,
        "-m",
        "reasoning_rl.cli",
        "grade",
        str(src),
        "-o",
        str(out),
        "--grader",
        spec,  # module:attr specs come from the command line only, never from a row
        "--workers",
        "1",
        "--timeout",
        "600",
        "--option",
        f"sleep_s={2 * FLUSH_S}",
        "--option",
        f"gate={gate}",
        "--option",
        "gate_from=5",
        "--no-progress",
    ]
    # SIGINT at its default in the child: a runner started in the background by a non-interactive shell (nohup
    # ... &) ignores SIGINT, the child inherits that, and Python then installs no KeyboardInterrupt handler.
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 300  # a hang guard only: rows 0-4 need no time of their own
    while not out.exists() or len(out.read_text().splitlines()) < 5:
        assert proc.poll() is None and time.monotonic() < deadline, "rows 0-4 were never written"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, text
    assert "interrupted" in text
    assert sorted(line["row"] for line in _lines(out)) == [1, 2, 3, 4, 5]  # the finished rows, none twice
    gate.touch()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    final = _lines(out)
    assert sorted(line["row"] for line in final) == list(range(1, rows + 1))
    assert all(line["verdict"] == "correct" for line in final)


def test_hf_directory_without_datasets_installed_is_a_clear_error(tmp_path: Path, monkeypatch) -> None:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "dataset_info.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "datasets", None)  # what an install without the train extra looks like
    res = runner.invoke(app, ["grade", str(hf), "-o", str(tmp_path / "o.jsonl"), "--no-progress"])
    assert res.exit_code == 2
    assert "needs the `datasets` package" in res.output and "Traceback" not in res.output
