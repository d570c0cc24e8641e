"""GradingPool on a real two-node local Ray cluster: same results as local workers, spread over both nodes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import context_test_graders as cg
import pytest
import runtime_test_graders as faulty

from graders.runtime import GradeRequest, GradingPool
from graders.types import GradeContext

ECHO = f"{faulty.__name__}:EchoGrader"
LEAKING = f"{faulty.__name__}:LeakingGrader"
pytestmark = [pytest.mark.slow, pytest.mark.distributed]


@pytest.fixture(scope="module")
def cluster_address() -> Iterator[str]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster.address
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def _wait_ready(pool: GradingPool, budget_s: float = 120.0) -> None:
    deadline = time.monotonic() + budget_s
    while not all(w["ready"] for w in pool.metrics()["workers"]):
        assert time.monotonic() < deadline, "Ray grading actors did not start"
        time.sleep(0.1)


def test_ray_pool_spreads_over_both_nodes_and_enforces_budgets(cluster_address: str) -> None:
    reqs = [GradeRequest(ECHO, str(i % 3), "1", {"sleep_s": 0.002}, id=i) for i in range(200)]
    with GradingPool(workers=2, backend="process") as local:
        expected = local.grade_batch(reqs)
    with GradingPool(workers=2, ray_address=cluster_address, timeout_s=2.0) as pool:
        pool.grade_batch([GradeRequest(ECHO, "w", "w")])  # registers the grader so actors warm it
        _wait_ready(pool)
        grades = pool.grade_batch(reqs)
        start = time.monotonic()
        hung, ok = pool.grade_batch(
            [GradeRequest(ECHO, "x", "x", {"hang": True}), GradeRequest(ECHO, "1", "1")]
        )
        elapsed = time.monotonic() - start
        after = pool.grade_batch([GradeRequest(ECHO, "1", "1")] * 10)
        metrics = pool.metrics()
    assert metrics["backend"] == "ray"
    assert [(g.verdict, g.details["answer"]) for g in grades] == [
        (g.verdict, g.details["answer"]) for g in expected
    ]
    assert len(metrics["nodes"]) == 2, metrics["nodes"]  # grades ran on both Ray nodes
    assert min(metrics["nodes"].values()) >= 20
    # the verdict is the check; the bound is a hang guard (the grader never returns on its own)
    assert hung.verdict == "error" and hung.reason.startswith("timeout") and elapsed < 2.0 + 60, elapsed
    assert ok.verdict == "correct" and all(g.verdict == "correct" for g in after)
    assert metrics["worker_restarts"] >= 1


def test_ray_actors_are_recycled_after_max_grades(cluster_address: str) -> None:
    with GradingPool(workers=2, ray_address=cluster_address, max_grades_per_worker=5) as pool:
        grades = pool.grade_batch([GradeRequest(ECHO, "1", "1", id=i) for i in range(24)])
        metrics = pool.metrics()
    assert all(g.verdict == "correct" for g in grades)
    per_actor: dict[int, int] = {}
    for g in grades:
        per_actor[g.details["pid"]] = per_actor.get(g.details["pid"], 0) + 1
    assert max(per_actor.values()) <= 5 and len(per_actor) >= 5
    assert metrics["workers_recycled"] >= 3 and metrics["worker_restarts"] == 0


def test_leaking_ray_actor_is_recycled_at_its_rss_cap(cluster_address: str) -> None:
    """Issue 28: Ray actors had no memory cap (one grew to 560 MB); they now report their RSS with each grade."""
    reqs = [GradeRequest(LEAKING, str(i), None, {"mb": 40}) for i in range(12)]
    with GradingPool(workers=1, ray_address=cluster_address, timeout_s=30.0, max_worker_rss_mb=400) as pool:
        _wait_ready(pool)
        grades = [pool.grade_batch([r])[0] for r in reqs]
        metrics = pool.metrics()
    assert all(g.verdict == "correct" for g in grades), grades
    assert metrics["workers_recycled"] >= 1 and metrics["worker_restarts"] == 0
    assert len({g.details["pid"] for g in grades}) >= 2


def test_rrl_grade_on_the_ray_cluster(cluster_address: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from reasoning_rl.cli.app import app

    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": i, "responses": [f"\\boxed{{{i % 4}}}", "\\boxed{1}"], "ground_truth": "1"})
            + "\n"
            for i in range(40)
        )
    )
    out, summary = tmp_path / "out.jsonl", tmp_path / "summary.json"
    res = CliRunner().invoke(
        app,
        [
            "grade",
            str(src),
            "-o",
            str(out),
            "--grader",
            "math",
            "--ray-address",
            cluster_address,
            "--workers",
            "2",
            "--no-progress",
            "--summary-json",
            str(summary),
        ],
    )
    assert res.exit_code == 0, res.output
    data = json.loads(summary.read_text())
    assert data["run"]["pool"]["backend"] == "ray"
    assert data["summary"]["overall"]["pass@2"] == 1.0
    assert data["summary"]["overall"]["mean_score"] == pytest.approx((10 + 40) / 80)


def test_ray_actors_get_the_declared_context_only(cluster_address: str) -> None:
    """The context crosses to Ray actors (it serialises) cut to the grader's declared fields."""
    ctx = GradeContext.from_messages("Say 7", data_source="d", extra_info={"target": 7}, row_id="r")
    with GradingPool(workers=1, ray_address=cluster_address) as pool:
        seen, plain = pool.grade_batch(
            [
                GradeRequest(f"{cg.__name__}:SeesContext", "7", None, context=ctx),
                GradeRequest(f"{cg.__name__}:NoContext", "7", None, context=ctx),
            ]
        )
        assert pool.metrics()["backend"] == "ray"
    assert seen.verdict == "correct", seen.reason
    assert seen.details["seen"]["extra_info"] == {"target": 7} and seen.details["seen"]["data_source"] is None
    assert plain.verdict == "correct" and plain.details["options"] == []
