"""The GPU probes' bookkeeping, on scripted input: which update steps ran alone or beside generation
(bench/gpu/engine_mode.py's busy mode), and the py-spy profile summary (bench/gpu/stacks_report.py)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))

import engine_mode  # noqa: E402
import stacks_report  # noqa: E402


class _ScriptedProc:
    """Stands in for the update process: its STEP lines, already written."""

    def __init__(self, lines: list[str]) -> None:
        self.stdout = io.StringIO("".join(lines))
        self.terminated = False

    def poll(self) -> int | None:
        return 0

    def terminate(self) -> None:
        self.terminated = True


def test_busy_update_steps_split_into_alone_and_during() -> None:
    began, ended = 100.0, 110.0
    # (end time, seconds): the compile step, two alone, one straddling the start, two inside, one past the end
    steps = [(60.0, 30.0), (98.0, 1.0), (99.5, 1.0), (100.5, 1.0), (102.0, 1.2), (109.0, 1.1), (110.5, 1.0)]
    proc = _ScriptedProc([f"STEP {e} {d} 98304\n" for e, d in steps] + ["noise line\n"])
    update = engine_mode.Update(proc)  # type: ignore[arg-type]
    update.wait_steps(len(steps))
    got = update.split(began, ended)
    assert proc.terminated
    assert got["update_alone_s"] == [
        1.0,
        1.0,
    ]  # the compile step is not "alone": it is not a train step's cost
    assert got["update_during_s"] == [1.2, 1.1]  # wholly inside the rounds; the straddlers are neither
    assert got["rounds_s"] == 10.0 and got["update_tokens"] == 98304.0
    assert got["update_steps"][0] == [-70.0, 30.0] and len(got["update_steps"]) == len(steps)


def test_busy_update_that_dies_early_is_one_clear_error() -> None:
    update = engine_mode.Update(_ScriptedProc(["STEP 1.0 0.5 98304\n"]))  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match="ended after 1 steps"):
        update.wait_steps(4)


def test_generate_split_deals_requests_round_robin_and_steps_every_engine() -> None:
    class Out:
        def __init__(self, rid: str, n: int) -> None:
            self.request_id, self.finished = rid, True
            self.outputs = [type("C", (), {"token_ids": list(range(n))})()]

    class Engine:
        def __init__(self) -> None:
            self.pending: list[str] = []
            self.steps = 0

        def add_request(self, rid: str, prompt: object, params: int) -> None:
            self.pending.append(rid)
            self.lengths = getattr(self, "lengths", {}) | {rid: params}

        def has_unfinished_requests(self) -> bool:
            return bool(self.pending)

        def step(self) -> list[Out]:  # one request finishes per step
            self.steps += 1
            rid = self.pending.pop(0)
            return [Out(rid, self.lengths[rid])]

    llms = [type("L", (), {"llm_engine": Engine()})() for _ in range(2)]
    lens = engine_mode.generate_split(llms, ["p"] * 5, [3, 4, 5, 6, 7], "t")
    assert lens == [3, 4, 5, 6, 7]  # in request order, whichever engine ran them
    assert [llm.llm_engine.steps for llm in llms] == [3, 2]  # dealt 0,2,4 / 1,3


def test_stacks_report_sums_py_spy_raw_stacks(tmp_path: Path) -> None:
    raw = tmp_path / "prof.txt"
    raw.write_text(
        'process 1:"python3 a.py";<module> (a.py:3);step (vllm/llm_engine.py:300);schedule (sched.py:10) 6\n'
        'process 1:"python3 a.py";<module> (a.py:3);step (vllm/llm_engine.py:300);schedule (sched.py:12) 2\n'
        'process 1:"python3 a.py";<module> (a.py:3);step (vllm/llm_engine.py:301);forward (model.py:5) 2\n'
        'process 1:"python3 a.py";<module> (a.py:9);train (t.py:1) 10\n'
        'process 2:"python3 b.py";<module> (b.py:1) 1\n'
    )
    procs = stacks_report.load(raw, lines=False)
    assert sum(procs['process 1:"python3 a.py"'].values()) == 20
    lines = stacks_report.summarize(procs['process 1:"python3 a.py"'], "step (vllm/llm_engine.py", top=5)
    text = "\n".join(lines)
    assert "10 samples hold" in text
    assert "80.0%  schedule (sched.py)" in text  # lines 10 and 12 merged without --lines
    assert "20.0%  forward (model.py)" in text
    assert stacks_report.summarize(procs['process 2:"python3 b.py"'], "step (", top=5) == [
        "  no sample holds 'step ('"
    ]
    out = subprocess.run(
        [sys.executable, str(Path(stacks_report.__file__)), str(raw), "--min-samples", "5"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "a.py" in out.stdout and "b.py" not in out.stdout  # process 2's one sample is under the floor
