"""Joining a Ray cluster fast or failing with the fix; describing it; refusing requests it cannot hold."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from reasoning_rl import cluster
from reasoning_rl.cluster import ClusterInfo, NodeInfo, validate_request
from reasoning_rl.config import ConfigError
from reasoning_rl.config.resources import ResourcesConfig


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def _nodes(*gpus_cpus: tuple[float, float], address: str | None = "10.0.0.1:6379") -> ClusterInfo:
    nodes = tuple(
        NodeInfo(f"n{i}", f"10.0.0.{i + 1}", cpus, gpus) for i, (gpus, cpus) in enumerate(gpus_cpus)
    )
    return ClusterInfo(nodes, ("gloo",), address)


def test_unreachable_address_fails_fast_with_the_fix() -> None:
    address = f"127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(ConfigError) as err:
        cluster.connect(ResourcesConfig(ray_address=address), world=2, device="cpu")
    # a hang guard, not a speed test: ray.init alone retries for minutes here; the probe gives up after PROBE_S
    assert time.monotonic() - start < cluster.PROBE_S + 60
    msg = str(err.value)
    assert "\n" not in msg and "resources.ray_address" in msg and "ray start --head" in msg and address in msg


def test_ray_client_address_is_probed_on_its_port() -> None:
    port = _closed_port()
    with pytest.raises(ConfigError, match=f"127.0.0.1:{port}"):
        cluster.probe_address(f"ray://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="not a number"):
        cluster.probe_address("head:port")


def test_auto_without_a_cluster_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray._private.utils as ray_utils

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_utils, "read_ray_address", lambda temp_dir=None: None)
    with pytest.raises(ConfigError, match="ray start --head"):
        cluster.resolve_address("auto")
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert cluster.resolve_address("auto") == "10.1.2.3:6379"
    assert cluster.resolve_address("ray://h:10001") == "ray://h:10001"


@pytest.mark.parametrize(
    ("resources", "device", "info", "key", "fix"),
    [
        ({"nodes": 3}, "cpu", _nodes((0, 4), (0, 4)), "resources.nodes=3", "ray start --address"),
        ({"ranks_per_node": 4}, "cuda", _nodes((2, 8)), "resources.ranks_per_node=4", "to 2 or less"),
        (
            {"nodes": 2, "ranks_per_node": 2},
            "cuda",
            _nodes((2, 8), (1, 8)),
            "ranks_per_node=2",
            "CUDA_VISIBLE",
        ),
        ({"ranks_per_node": 2}, "cuda", _nodes((0, 8)), "run.device=cuda", "run.device=cpu"),
        (
            {"ranks_per_node": 2, "placement": "split", "rollout_ranks": 2},
            "cpu",
            _nodes((0, 8)),
            "resources.rollout_ranks=2",
            "lower resources.rollout_ranks",
        ),
        ({"ranks_per_node": 6}, "cpu", _nodes((0, 4)), "resources.ranks_per_node=6", "--num-cpus"),
    ],
)
def test_impossible_requests_name_the_key_and_the_fix(
    resources: dict, device: str, info: ClusterInfo, key: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate_request(ResourcesConfig(**resources), info, device=device)
    msg = str(err.value)
    assert key in msg and fix in msg and "\n" not in msg


def test_possible_requests_pass() -> None:
    validate_request(ResourcesConfig(nodes=2, ranks_per_node=2), _nodes((2, 8), (4, 8)), device="cuda")
    validate_request(ResourcesConfig(), _nodes((8, 64)), device="cuda")  # None: every GPU of the node
    validate_request(
        ResourcesConfig(ranks_per_node=3, placement="split", rollout_ranks=1), _nodes((0, 4)), device="cpu"
    )
    # a local instance started by the run adds one CPU slot per rank: 8 CPU ranks fit a 2-core machine
    validate_request(ResourcesConfig(ranks_per_node=8), _nodes((0, 2), address=None), device="cpu")


def test_local_gpu_count_decides_the_local_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "local_gpu_count", lambda: 2)
    info = cluster.local_cluster("cuda")
    assert info.nodes[0].gpus == 2 and info.address is None
    validate_request(ResourcesConfig(ranks_per_node=2), info, device="cuda")
    with pytest.raises(ConfigError, match="ranks_per_node=3"):
        validate_request(ResourcesConfig(ranks_per_node=3), info, device="cuda")
    assert cluster.ranks_per_node(ResourcesConfig(), "cuda") == 2


@pytest.fixture
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.distributed
@pytest.mark.slow
def test_describe_a_local_ray_instance(local_ray: None) -> None:
    info = cluster.describe()
    assert len(info.nodes) == 1 and info.nodes[0].cpus == 2 and "gloo" in info.backends
    assert "1 node(s)" in info.summary() and "2 CPU" in info.summary()
    validate_request(ResourcesConfig(ranks_per_node=2), info, device="cpu")
    with pytest.raises(ConfigError, match="resources.nodes=2"):
        validate_request(ResourcesConfig(nodes=2), info, device="cpu")
    # already connected: connect joins nothing and owns nothing
    assert cluster.connect(ResourcesConfig(ranks_per_node=2), world=2, device="cpu") is False


@pytest.mark.distributed
@pytest.mark.slow
def test_join_a_two_node_cluster_by_address() -> None:
    pytest.importorskip("ray")
    import ray
    from ray.cluster_utils import Cluster

    two = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        two.add_node(num_cpus=1)
        two.wait_for_nodes()
        res = ResourcesConfig(nodes=2, ranks_per_node=1, ray_address=two.address)
        assert cluster.connect(res, world=2, device="cpu") is True
        info = cluster.describe(two.address)
        assert len(info.nodes) == 2 and all(n.cpus == 1 for n in info.nodes)
        validate_request(res, info, device="cpu")
        with pytest.raises(ConfigError, match="ranks_per_node=2 CPU ranks"):
            validate_request(ResourcesConfig(nodes=2, ranks_per_node=2), info, device="cpu")
    finally:
        ray.shutdown()
        two.shutdown()


@pytest.mark.distributed
@pytest.mark.slow
def test_the_local_instance_runs_its_workers_at_nice_0(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's workers run at nice 15 unless told otherwise; the ranks are the run's critical path (beside two busy
    processes on 2 cores a nice-15 rank got ~3 % of a core), so the instance `rrl train` starts sets 0."""
    pytest.importorskip("ray")
    import ray

    monkeypatch.delenv("RAY_worker_niceness", raising=False)  # the tests' own clusters set it (conftest)
    assert cluster.connect(ResourcesConfig(ranks_per_node=1), world=1, device="cpu") is True
    try:
        niceness = ray.get(ray.remote(lambda: os.nice(0)).remote())
    finally:
        ray.shutdown()
    assert niceness == os.nice(0)  # the driver's own (a CI may start the suite niced), not 15 above it
