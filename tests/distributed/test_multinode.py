"""Two Ray nodes on this machine (``ray.cluster_utils.Cluster``), one CPU rank each: the run joins the cluster by
``resources.ray_address``, its ranks land on different nodes (STRICT_SPREAD), and it matches the 2-rank run on one
node (tolerances: ``tests/distributed/runs.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.runs import assert_same_run, env, train, write_config

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture
def two_nodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A head node (one rank + the grading worker) and a second node (one rank); shut down after the test."""
    cluster_utils = pytest.importorskip("ray.cluster_utils")
    for key, value in env().items():  # the nodes' worker processes inherit this environment
        monkeypatch.setenv(key, value)
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


def test_two_node_cluster_matches_single_node(
    two_nodes: Any, runs: Callable[[str, int], Path], tmp_path: Path, tiny_model_dir: Path
) -> None:
    cfg = write_config(
        tmp_path, tiny_model_dir, "grpo-2n", "grpo", nodes=2, ranks_per_node=1, ray_address=two_nodes.address
    )
    out = train(cfg)
    assert "placement group STRICT_SPREAD" in out.stdout + out.stderr
    run = tmp_path / "grpo-2n"
    nodes = {
        rec["attrs"]["rank"]: rec["attrs"]["node_id"]
        for rec in map(json.loads, (run / "trace.jsonl").read_text().splitlines())
        if rec.get("name") == "worker_rss_peak_bytes"
    }
    assert sorted(nodes) == [0, 1] and nodes[0] != nodes[1]  # one rank per node
    assert_same_run(run, runs("grpo", 2))
