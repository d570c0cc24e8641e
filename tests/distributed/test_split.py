"""Split placement: 1 training rank + 1 rollout rank (its own Ray actor, weights broadcast over gloo) gives the
1-rank colocated run step for step, with the freshness gate proving every hand-off on the rollout rank.

Tolerances: ``tests/distributed/runs.py`` (the same as the 1-vs-2-rank equivalence).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed.runs import STEPS, assert_same_run, step_metrics, train, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_split_grpo_matches_colocated_one_rank(
    runs: Callable[[str, int], Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = write_config(
        tmp_path, tiny_model_dir, "grpo-split", "grpo", ranks_per_node=2, placement="split", rollout_ranks=1
    )
    proc = train(cfg, "rollout.freshness_check=true")
    assert "1 rollout rank(s) of their own" in proc.stdout
    split = tmp_path / "grpo-split"
    assert_same_run(split, runs("grpo", 1))
    rows = step_metrics(split)
    # the gate ran on the rollout rank (training ranks send only: their stats carry no check) and passed
    assert all("handoff/probe_gap" in r and r["handoff/probe_gap"] <= r["handoff/probe_tol"] for r in rows)
    trace = [json.loads(line) for line in (split / "trace.jsonl").read_text().splitlines()]
    per_step: dict[tuple[int, str], dict[int, float]] = defaultdict(dict)
    for rec in trace:
        if rec.get("type") == "counter" and rec["name"] in ("handoff_bytes", "handoff_gbps"):
            per_step[(rec["step"], rec["name"])][rec["attrs"]["rank"]] = rec["value"]
    for step in range(1, STEPS + 1):
        sent = per_step[(step, "handoff_bytes")]
        assert sorted(sent) == [0, 1] and sent[0] == sent[1] > 0  # rank 0 sent what rank 1 (rollout) received
        assert sorted(per_step[(step, "handoff_gbps")]) == [0, 1]
