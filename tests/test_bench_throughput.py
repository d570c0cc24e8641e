"""bench/gpu/throughput.py: Σtokens/Σtime over measured steps, on alternating, constant and noisy series.

The H200 re-run of 2026-12-04 printed ``ours:lag1 / ours:sync: 1.69x`` (a median of per-step rates) for a run
whose total tokens over total time was 0.44x sync: steps alternating 1.7 s and 33 s. These series would flip
that sign again under the old summary; the ratio must come out as the hand computation says.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))

import interleave  # noqa: E402
import throughput  # noqa: E402
import workload_probe  # noqa: E402

# continuous-like: a short step that finds its groups already done, then a long one generating two batches
ALT_S = [1.7, 33.0, 1.9, 32.6, 2.1, 33.9]
ALT_TOK = [370_000, 370_000, 370_000, 370_000, 370_000, 370_000]  # each step trains one batch's tokens
SYNC_S = [8.2] * 6
SYNC_TOK = [370_000] * 6


def run(name: str, steps: list[float], tokens: list[float], **extra: object) -> dict:
    return {"name": name, "steps_s": steps, "tokens": tokens, **extra}


def test_alternating_steps_ratio_is_total_tokens_over_total_time() -> None:
    s = throughput.summarise([run("ours:lag1", ALT_S, ALT_TOK), run("ours:sync", SYNC_S, SYNC_TOK)])
    want = (sum(ALT_TOK) / sum(ALT_S)) / (sum(SYNC_TOK) / sum(SYNC_S))
    assert s["ratios"]["ours:lag1 / ours:sync"] == pytest.approx(want, abs=1e-3)
    assert want < 1  # continuous is the slower one here: the old median of rates said ~5x faster
    median_of_rates = sorted(t / x for t, x in zip(ALT_TOK, ALT_S, strict=True))[3] / (370_000 / 8.2)
    assert median_of_rates > 1
    assert s["sides"]["ours:lag1"]["tokens_per_s"] == round(sum(ALT_TOK) / sum(ALT_S))
    assert s["sides"]["ours:lag1"]["step_s"]["median"] == pytest.approx(17.35)


def test_constant_series_and_pooled_repeats() -> None:
    """Two interleaved repeats of a side pool their steps; constant steps give the obvious figure."""
    runs = [run("a", [2.0, 2.0], [100, 100]), run("b", [4.0], [100]), run("a", [2.0], [100])]
    s = throughput.summarise(runs)
    assert s["sides"]["a"]["tokens_per_s"] == 50 and s["sides"]["a"]["step_s"]["n"] == 3
    assert s["ratios"]["a / b"] == pytest.approx(2.0) and s["ratios"]["b / a"] == pytest.approx(0.5)


def test_noisy_series_matches_the_definition() -> None:
    rng = random.Random(7)
    steps = [rng.uniform(0.5, 9.0) for _ in range(40)]
    tokens = [rng.randint(1_000, 90_000) for _ in range(40)]
    gen = [t // 3 for t in tokens]
    s = throughput.summarise([run("x", steps, tokens, gen_tokens=gen), run("y", [1.0], [1_000])])
    assert s["sides"]["x"]["tokens_per_s"] == round(sum(tokens) / sum(steps))
    assert s["sides"]["x"]["gen_tokens_per_s"] == round(sum(gen) / sum(steps))
    assert "gen_tokens_per_s" not in s["sides"]["y"]  # never a figure from part of the runs
    assert s["ratios"]["x / y"] == pytest.approx(sum(tokens) / sum(steps) / 1_000, abs=1e-3)


def test_bad_runs_are_refused_with_the_run_named() -> None:
    with pytest.raises(ValueError, match="'a'.*2 steps_s but 1 tokens"):
        throughput.summarise([run("a", [1.0, 2.0], [5])])
    with pytest.raises(ValueError, match="missing tokens"):
        throughput.summarise([{"name": "b", "steps_s": [1.0]}])
    with pytest.raises(ValueError, match="workload"):
        throughput.result({}, [run("a", [1.0], [1])])


def test_interleave_summary_uses_the_one_definition(tmp_path: Path) -> None:
    """interleave.py's summary of an alternating side against a steady one: Σtokens/Σtime, and the JSON it
    writes recomputes to the same figures from its raw ``runs``."""
    runs = [run("ours:lag1", ALT_S, ALT_TOK), run("ours:sync", SYNC_S, SYNC_TOK)]
    doc = interleave.summarise(runs)
    assert doc["ratios"]["ours:lag1 / ours:sync"] == pytest.approx(
        (sum(ALT_TOK) / sum(ALT_S)) / (sum(SYNC_TOK) / sum(SYNC_S)), abs=1e-3
    )
    path = tmp_path / "r.json"
    path.write_text(json.dumps(throughput.result({"model": "x"}, runs)))
    again = json.loads(path.read_text())
    assert throughput.summarise(again["runs"]) == {"sides": again["sides"], "ratios": again["ratios"]}


def test_records_from_trl_and_ours_outputs_drop_warm_up_and_keep_per_step_tokens() -> None:
    """What interleave.py reads from TRL's log (its first step is warm-up) and from our child's JSON becomes
    run records with one token count per measured step."""
    log = "\n".join(
        [
            "STEP 1 30.0s",
            "STEP 2 20.0s",
            "STEP 3 22.0s",
            'RESULT {"steps": [30.0, 20.0, 22.0], "real_tokens": [9000, 10000, 11000],'
            ' "response_len_mean": [100.0, 110.0, 120.0], "reward_mean": [0.1, 0.2, 0.3]}',
        ]
    )
    rec = interleave.trl_record("trl:off:32", interleave.parse_trl(log), "realistic")
    assert rec["steps_s"] == [20.0, 22.0] and rec["tokens"] == [10000.0, 11000.0]
    assert rec["gen_tokens"] == [110.0 * 64 * 8, 120.0 * 64 * 8] and rec["reward"] == [0.2, 0.3]
    cut = log[: log.index("RESULT")] + "TIMEOUT"  # a run cut after its steps, before its RESULT line
    assert interleave.trl_record("trl:off:32", interleave.parse_trl(cut), "realistic")["steps_s"] == []
    logged = "\n".join(
        f"STEP {i + 1} {s}s\n{{'loss': '0.1', 'num_tokens': '{t}', 'completions/mean_length': '{m}', "
        f"'reward': '{r}'}}"
        for i, (s, t, m, r) in enumerate(
            [(30.0, 9e3, 100, 0.1), (20.0, 1.9e4, 110, 0.2), (22.0, 3e4, 120, 0.3)]
        )
    )
    cut = interleave.trl_record("trl:off:32", interleave.parse_trl(logged + "\nTIMEOUT"), "realistic")
    assert cut["steps_s"] == [20.0, 22.0] and cut["tokens"] == [10000.0, 11000.0]
    assert cut["gen_tokens"] == rec["gen_tokens"] and cut["reward"] == rec["reward"]
    anchor = interleave.trl_record(
        "trl:off:64", interleave.parse_trl("STEP 1 9s\nSTEP 2 5s\nSTEP 3 4s"), "anchor"
    )
    assert anchor["steps_s"] == [5.0, 4.0] and anchor["tokens"] == [float(interleave.TOKENS)] * 2
    ours = interleave.ours_record(
        "ours:sync",
        {"steps": [{"step_s": 6.0, "real_tokens": 5000, "response_tokens": 4000, "reward": 0.4}]},
    )
    assert ours == {
        "name": "ours:sync",
        "steps_s": [6.0],
        "tokens": [5000.0],
        "gen_tokens": [4000.0],
        "reward": [0.4],
    }
    throughput.summarise([rec, anchor, ours])  # all three are valid run records


def test_realistic_summary_is_total_over_total_and_weights_the_engine_by_generation_time(
    tmp_path: Path,
) -> None:
    """realistic.py's summary of a run's metrics (warm-up step dropped): Σtokens/Σtime, skipped rows and
    computed tokens per step, engine occupancy averaged over generation time, never a median of steps."""
    pytest.importorskip("torch")
    import realistic

    steps = [  # step 1 (warm-up), then a short and a long step, as continuous rollouts alternate
        (1, 50.0, 1.0, 1000, 1000, 0, 0.1, 10.0),
        (2, 2.0, 1.0, 1000, 250, 6, 0.9, 500.0),
        (3, 30.0, 28.0, 3000, 3000, 0, 0.2, 100.0),
    ]
    rows = [
        {
            "step": s,
            "time/step_s": t,
            "time/generate_s": g,
            "time/update_s": 0.5,
            "throughput/train_tokens": tok,
            "throughput/computed_tokens": comp,
            "policy/skipped_rows": skip,
            "rollout/running_full_frac": full,
            "rollout/running_mean": mean,
            "samples": 8,
            "response/length_mean": 10.0,
            "response/length_max": 12,
            "response/truncation_rate": 0.0,
            "reward/mean": 0.5,
        }
        for s, t, g, tok, comp, skip, full, mean in steps
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "seq_lens").mkdir()
    for s in (2, 3):
        (tmp_path / "seq_lens" / f"{s}.txt").write_text("10 12")
    out = realistic.summarise_ours(tmp_path)
    assert [s["step"] for s in out["steps"]] == [2, 3]
    assert out["tokens_per_s"] == round((1000 + 3000) / (2.0 + 30.0))
    assert [s["computed_tokens"] for s in out["steps"]] == [250.0, 3000.0]
    assert [s["skipped_rows"] for s in out["steps"]] == [6.0, 0.0]
    assert out["running_mean"] == pytest.approx((500.0 * 1.0 + 100.0 * 28.0) / 29.0, abs=0.1)
    assert out["running_full_frac"] == pytest.approx((0.9 * 1.0 + 0.2 * 28.0) / 29.0, abs=1e-3)
    share = 250 / 1000  # MFU's FLOPs: the computed tokens, the attention term scaled by the same share
    want = realistic.update_flops(250.0, []) + share * realistic.update_flops(0.0, [10, 12])
    assert realistic.computed_flops(rows[1], [10, 12]) == pytest.approx(want)
    assert realistic.computed_flops(rows[1], [10, 12]) < realistic.update_flops(1000.0, [10, 12])
    assert out["step_cost"] == []  # a run without the trace's engine_steps counters


def test_the_engine_step_cost_curve_of_the_measured_steps_reaches_the_summary(tmp_path: Path) -> None:
    """Issue 44: realistic.py pools the trace's ``engine_steps`` counters over the measured steps (the warm-up
    step's left out) into the run's JSON, and interleave.py's summary prints the curve per run."""
    pytest.importorskip("torch")
    import realistic

    from reasoning_rl.step_cost import StepCost
    from reasoning_rl.trace import TraceWriter

    rows = [
        {
            "step": s,
            "time/step_s": 1.0,
            "time/generate_s": 0.5,
            "time/update_s": 0.5,
            "throughput/train_tokens": 100,
            "samples": 1,
            "response/length_mean": 10.0,
            "response/length_max": 10,
        }
        for s in (1, 2, 3)
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "seq_lens").mkdir()
    for s in (2, 3):
        (tmp_path / "seq_lens" / f"{s}.txt").write_text("10")
    trace = TraceWriter(tmp_path / "trace.jsonl")
    cost = StepCost(target=512)
    for step, (running, seconds) in enumerate([(512, 9.0), (300, 0.008), (512, 0.016)], start=1):
        cost.add(running, seconds, seconds / 2, running)
        cost.flush(trace, step)
    trace.close()
    got = realistic.summarise_ours(tmp_path)["step_cost"]
    assert [(b["lo"], b["hi"], b["steps"], b["seconds"]) for b in got] == [
        (288, 320, 1, 0.008),
        (512, None, 1, 0.016),
    ]
    ours = {
        "name": "ours:lag1",
        "side": "ours",
        "steps_s": [1.0, 1.0],
        "tokens": [100.0, 100.0],
        "step_cost": got,
    }
    text = interleave.table([ours], interleave.summarise([ours]))
    assert "ours:lag1 engine step cost by running batch (measured steps):" in text
    assert [line.split()[:4] for line in text.splitlines() if line.startswith("     288-319")] == [
        ["288-319", "1", "8.00", "26.7"]
    ]


def test_the_learning_run_keeps_all_steps_apart_and_compares_the_first_n(tmp_path: Path, monkeypatch) -> None:
    """interleave.py --learn-steps: the first ours:sync run takes that many steps (the reward curve, kept under
    ``learning``); its record compares only the first --steps, as many as the other runs measure."""
    import argparse
    import subprocess

    calls: list[list[str]] = []

    def child(cmd: list[str], **_: object) -> subprocess.CompletedProcess:
        calls.append(cmd)
        n = int(cmd[cmd.index("--steps") + 1])
        steps = [
            {"step_s": 5.0 + i, "real_tokens": 1000 + i, "response_tokens": 800, "reward": 0.1 * i}
            for i in range(n)
        ]
        Path(cmd[cmd.index("--out") + 1]).write_text(json.dumps({"steps": steps}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(interleave.subprocess, "run", child)
    args = argparse.Namespace(
        workload="realistic",
        model=Path("m.gguf"),
        data=Path("d.jsonl"),
        steps=3,
        work=str(tmp_path),
        run_timeout=9,
    )
    rec = interleave.run_ours("ours:sync", "sync", args, 0, tmp_path / "log", 20)
    assert rec["steps_s"] == [5.0, 6.0, 7.0] and rec["tokens"] == [1000.0, 1001.0, 1002.0]
    assert len(rec["learning"]["steps_s"]) == 20 and rec["learning"]["reward"][-1] == pytest.approx(1.9)
    plain = interleave.run_ours("ours:noskip", "noskip", args, 1, tmp_path / "log", 3)
    assert "learning" not in plain and len(plain["steps_s"]) == 3
    assert interleave.REAL_PRESETS["noskip"]["REAL_SKIP_ZERO_ADV"] == "0"
    throughput.summarise([rec, plain])


def test_the_workload_probe_writes_a_raw_run_per_temperature_that_recomputes() -> None:
    """The probe's file is a GPU result like every other: one run per temperature (its one generation pass),
    prompt + generated tokens, generated alone and the mean reward; the summary recomputes from it."""
    run = workload_probe.probe_run(
        1.0, 2.0, prompt_tokens=300, lengths=[10, 30, 20, 40], groups=[[1, 0], [0, 0]]
    )
    throughput.check_run(run)
    assert run == {
        "name": "probe:t1",
        "steps_s": [2.0],
        "tokens": [400],
        "gen_tokens": [100],
        "reward": [0.25],
    }
    doc = throughput.result({"model": "m", "temperatures": [1.0]}, [run])
    assert doc["sides"]["probe:t1"]["tokens_per_s"] == 200
