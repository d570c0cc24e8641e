"""Continuous rollouts on split placement (issue 31): 1 training rank + 1 rollout rank whose ``LiveEngine`` keeps
the requests resident across updates, the weights broadcast to it and swapped in between two decode steps.

- paused (``rollout.overlap=false``: the rollout rank steps only inside the driver's ``advance``) it is the
  single-process continuous run step for step (same seed, ``max_lag=1``; tolerances of ``runs.py``), with
  samples that continued across an update;
- overlapped (the default: the rank decodes during the update and the hand-off) no token lags the trainer by more
  than ``max_lag``, each sample's versions only grow, the tokens decoded during the update are reported
  (``rollout/overlap_tokens``, trace ``overlap_tokens``), an eval stream every step runs beside the resident
  requests, and across a checkpoint + resume (its partial samples resubmitted to the new rank) every drawn
  prompt is trained exactly once or still in flight.

The overlapped run uses ``gated_vllm`` (``gated_engine.py``): vLLM one group at a time, lock-step with the
driver, and a hand-off that waits for a decode step after the driver's last advance. So at every update the
younger groups are unfinished and the rank decodes some of them, by construction rather than by how a loaded
runner schedules the decode thread (issue 41); a rank that stopped decoding for the update fails the run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rrl_testutil import sample_rows

from tests.distributed.runs import REPO, assert_same_run, step_metrics, train, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.vllm]

SPLIT = {"ranks_per_node": 2, "placement": "split", "rollout_ranks": 1}
# vLLM, one step of lag, and few running sequences of the admitted ones: later groups start while older ones
# still decode, so some requests are mid-sample at an update by construction
CONTINUOUS = ("rollout.engine=vllm", "rollout.max_lag=1", "rollout.engine_args={max_num_seqs: 4}")


def test_paused_split_matches_the_single_process_continuous_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    lagged = (*CONTINUOUS, "rollout.max_tokens=16")
    colocated = write_config(tmp_path, tiny_model_dir, "colocated", "grpo")
    train(colocated, *lagged)
    split_cfg = write_config(tmp_path, tiny_model_dir, "paused", "grpo", **SPLIT)
    proc = train(split_cfg, *lagged, "rollout.overlap=false", "rollout.freshness_check=true")
    assert "continuous rollouts on 1 rollout rank(s) of their own, decoding only when stepped" in proc.stdout
    split = tmp_path / "paused"
    assert_same_run(split, tmp_path / "colocated")
    rows = step_metrics(split)
    assert [r["staleness/lag_max"] for r in rows] == [
        r["staleness/lag_max"] for r in step_metrics(tmp_path / "colocated")
    ]
    assert all(r["rollout/overlap_tokens"] == 0 for r in rows)  # paused: nothing decodes during the update
    assert all(r["handoff/probe_gap"] <= r["handoff/probe_tol"] for r in rows)  # the gate ran beside them
    for step in range(1, len(rows) + 1):  # the same tokens with the same versions
        assert [r["versions"] for r in sample_rows(split, step)] == [
            r["versions"] for r in sample_rows(tmp_path / "colocated", step)
        ]
    spans = [
        r
        for step in range(1, len(rows) + 1)
        for r in sample_rows(split, step)
        if r["versions"][-1] > r["versions"][0]
    ]
    assert spans, "no sample continued across an update"


def gated_engine_plugin(tmp: Path) -> tuple[Path, ...]:
    """Import paths that publish ``rollout.engine=gated_vllm`` under the ``reasoning_rl.engines`` entry points
    (a ``.dist-info`` beside nothing else) and hold its module, for the run's driver and its Ray ranks."""
    info = tmp / "plugins" / "rrl_gated_engine-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: rrl-gated-engine\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[reasoning_rl.engines]\ngated_vllm = gated_engine:make\n")
    return tmp / "plugins", REPO / "tests" / "distributed"


def test_overlapped_split_bounds_the_lag_and_resumes_losslessly(tmp_path: Path, tiny_model_dir: Path) -> None:
    max_lag, batch, n, steps = 1, 2, 4, 4
    cfg = write_config(tmp_path, tiny_model_dir, "overlap", "grpo", **SPLIT)
    paths = gated_engine_plugin(tmp_path)
    shape = (
        "rollout.engine=gated_vllm",  # vLLM one group (n = its SLOTS) at a time, in lock-step with the driver
        "rollout.max_lag=1",
        "rollout.ignore_eos=true",  # every sample exactly max_tokens: groups finish in admission order
        "rollout.max_tokens=24",
        f"rollout.n={n}",
        f"trainer.batch_size={batch}",
        "algorithm.mini_batch_size=4",
        "data.train.size=32",
        "data.val={generator: fixed_digit, size: 3}",  # an eval stream on the rank, beside the resident requests
        "eval.every=1",
    )
    first = train(cfg, *shape, "trainer.steps=2", paths=paths)
    assert "decoding during the update" in first.stdout
    run = tmp_path / "overlap"
    saved = json.loads((run / "checkpoints" / "step_2" / "trainer_state.json").read_text())["frontier"]
    # the 2 groups admitted at step 2 are younger than the 2 it trained: unfinished at its update
    assert len(saved["partial"]) == batch * n, (
        "the checkpoint holds no partial sample: the resume proves nothing"
    )
    out = train(cfg, *shape, f"trainer.steps={steps}", "trainer.resume=auto", paths=paths)
    assert "(step 2)" in out.stdout

    trained: list[str] = []
    for step in range(1, steps + 1):
        assert len((run / "eval" / f"step_{step}.jsonl").read_text().splitlines()) == 3
        rows = sample_rows(run, step)
        assert len(rows) == batch * n
        for r in rows:
            versions = r["versions"]
            assert versions and versions == sorted(versions)  # a sample's tokens: old weights, then new ones
            assert all(0 <= (step - 1) - v <= max_lag for v in versions), (step, versions)  # per token
        trained += sorted({r["id"].split("#")[0] for r in rows})
    state = json.loads((run / "checkpoints" / f"step_{steps}" / "trainer_state.json").read_text())["frontier"]
    in_flight = [g["uid"] for g in state["groups"]]
    drawn = state["schedule"]["next_ticket"]
    assert drawn <= 32  # one epoch: a prompt drawn twice would show as a repeated uid
    assert len(trained) == len(set(trained)) == steps * batch  # none trained twice
    assert not set(trained) & set(in_flight)
    assert len(trained) + len(in_flight) == drawn  # none lost

    rows = step_metrics(run)
    assert len(rows) == steps
    assert rows[2]["rollout/resubmitted"] == len(
        saved["partial"]
    )  # the resume's partial samples, resubmitted
    assert all(r["staleness/lag_max"] <= max_lag for r in rows)
    overlap = [r["rollout/overlap_tokens"] for r in rows]
    assert all(t > 0 for t in overlap), f"the rollout rank did not decode during every update: {overlap}"
    trace = [json.loads(line) for line in (run / "trace.jsonl").read_text().splitlines()]
    counted = {
        rec["step"] for rec in trace if rec.get("type") == "counter" and rec["name"] == "overlap_tokens"
    }
    assert counted == set(range(1, steps + 1))
