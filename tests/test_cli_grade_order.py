"""``rrl grade``: a finished OUTPUT is in input order, also after a resume appended the missing rows (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from reasoning_rl.cli.app import app


def test_output_is_in_input_order_after_a_resume(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "response": f"\\boxed{{{i}}}", "ground_truth": str(i % 3)}) + "\n"
            for i in range(1, 7)
        )
    )
    out = tmp_path / "out.jsonl"
    args = ["grade", str(src), "-o", str(out), "--grader", "math", "--workers", "1", "--no-progress"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    lines = out.read_text().splitlines()
    assert [json.loads(line)["row"] for line in lines] == [1, 2, 3, 4, 5, 6]
    # As if the first run had been stopped with rows 2, 4, 5, 6 finished: the resume appends 1 and 3.
    out.write_text("".join(line + "\n" for line in lines if json.loads(line)["row"] not in (1, 3)))
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in rows] == [1, 2, 3, 4, 5, 6]  # before: 2, 4, 5, 6, 1, 3
    assert [r["id"] for r in rows] == [f"q{i}" for i in range(1, 7)]
    assert [r["verdict"] for r in rows] == ["correct", "correct"] + ["incorrect"] * 4  # 1, 2 equal i % 3


def test_module_class_grader_from_a_plain_file_in_the_working_directory(tmp_path: Path) -> None:
    """The documented `--grader module:Class`: a .py file beside the data, no package, run by the `rrl` script
    (whose sys.path does not hold the working directory), graded in worker processes."""
    import os
    import subprocess
    import sys

    (tmp_path / "my_grader.py").write_text(
        "from graders import Grade\n\n"
        "class Shout:\n"
        "    name = 'shout'\n"
        "    version = '1'\n"
        "    def grade(self, response, ground_truth, **options):\n"
        "        ok = response.strip() == str(ground_truth).upper()\n"
        "        return Grade.correct('loud') if ok else Grade.incorrect('quiet')\n"
    )
    src = tmp_path / "in.jsonl"
    src.write_text(
        json.dumps({"response": "HI", "ground_truth": "hi"})
        + "\n"
        + json.dumps({"response": "hi", "ground_truth": "hi"})
        + "\n"
    )
    rrl = Path(sys.executable).with_name("rrl")
    repo = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run(
        [
            str(rrl),
            "grade",
            "in.jsonl",
            "-o",
            "out.jsonl",
            "--grader",
            "my_grader:Shout",
            "--workers",
            "1",
            "--no-progress",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": repo},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(r["grader"], r["verdict"], r["reason"]) for r in rows] == [
        ("shout", "correct", "loud"),
        ("shout", "incorrect", "quiet"),
    ]


def test_limit_takes_the_first_rows_of_each_source_and_resumes_with_them(tmp_path: Path) -> None:
    rows = [
        {"id": f"{s}{i}", "data_source": s, "response": f"\\boxed{{{i}}}", "ground_truth": str(i)}
        for i in range(4)
        for s in ("a", "b")
    ] + [{"id": "c0", "data_source": "c", "response": "x", "ground_truth": "1"}]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    args = [
        "grade",
        str(src),
        "-o",
        str(out),
        "--grader",
        "math",
        "--workers",
        "1",
        "--no-progress",
        "--limit",
        "2",
        "--summary-json",
        str(summary),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a0", "b0", "a1", "b1", "c0"]
    data = json.loads(summary.read_text())
    assert data["run"]["rows_over_limit"] == 4 and "4 past --limit left out" in res.output
    assert {k: v["rows"] for k, v in data["summary"]["by_source"].items()} == {"a": 2, "b": 2, "c": 1}
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n" + lines[3] + "\n")  # resume: the same rows are picked again
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["a0", "b0", "a1", "b1", "c0"]
    more = CliRunner().invoke(
        app, [*args[:-4], "--limit", "3"]
    )  # a larger limit grades on into the same OUTPUT
    assert more.exit_code == 0, more.output
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
        "a0",
        "b0",
        "a1",
        "b1",
        "a2",
        "b2",
        "c0",
    ]
