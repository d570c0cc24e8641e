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


def test_a_rollout_rank_sharing_the_training_gpu_matches_colocated_one_rank(
    runs: Callable[[str, int], Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    """resources.share_gpus (issue 44): one rank of the layout trains, the rollout rank is an extra process in its
    placement-group bundle (on CUDA: the same GPU); the run is split placement's, so the colocated one's."""
    cfg = write_config(
        tmp_path,
        tiny_model_dir,
        "grpo-shared",
        "grpo",
        ranks_per_node=1,
        placement="split",
        rollout_ranks=1,
        share_gpus=True,
    )
    proc = train(cfg, "rollout.freshness_check=true")
    assert "workers: 1 ranks" in proc.stdout and "1 rollout rank(s) of their own" in proc.stdout
    shared = tmp_path / "grpo-shared"
    assert_same_run(shared, runs("grpo", 1))
    assert all(r["handoff/probe_gap"] <= r["handoff/probe_tol"] for r in step_metrics(shared))


def test_split_lora_sends_only_the_adapters_and_matches_colocated(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """LoRA on split placement: the rollout rank's engine keeps its base and gets only the adapters (bytes =
    adapter bytes, every step, checked by the gate there); the run equals the colocated LoRA run (merged
    hand-off) step for step, the KL reference being the base with the adapters disabled in both."""
    from reasoning_rl.config import LoraConfig
    from reasoning_rl.policy import Policy

    lora = ("model.lora.rank=4", "rollout.freshness_check=true")
    colocated = write_config(tmp_path, tiny_model_dir, "lora-colocated", "grpo")
    train(colocated, *lora)
    split_cfg = write_config(
        tmp_path, tiny_model_dir, "lora-split", "grpo", ranks_per_node=2, placement="split", rollout_ranks=1
    )
    train(split_cfg, *lora)
    split = tmp_path / "lora-split"
    assert_same_run(split, tmp_path / "lora-colocated")
    policy = Policy.from_pretrained(str(tiny_model_dir), lora=LoraConfig(rank=4))
    adapter_bytes = sum(p.numel() * p.element_size() for p in policy.trainable_parameters())
    trace = [json.loads(line) for line in (split / "trace.jsonl").read_text().splitlines()]
    sent: dict[int, dict[int, float]] = defaultdict(dict)
    for rec in trace:
        if rec.get("type") == "counter" and rec["name"] == "handoff_bytes":
            sent[rec["step"]][rec["attrs"]["rank"]] = rec["value"]
    assert sorted(sent) == list(range(1, STEPS + 1))
    assert all(by_rank == {0: adapter_bytes, 1: adapter_bytes} for by_rank in sent.values())
    rows = step_metrics(split)
    assert all(r["handoff/probe_gap"] <= r["handoff/probe_tol"] for r in rows)
