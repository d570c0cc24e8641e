"""The Ray cluster a run's ranks live on: joining it fast or failing with the fix, describing it, and checking a
``resources`` request against it before a placement group waits forever for bundles that cannot exist.

``connect(resources, world=, device=)``: ``resources.ray_address`` None starts a local Ray instance sized for the
request; ``'auto'`` / ``'HOST:PORT'`` / ``'ray://HOST:PORT'`` joins an existing cluster. The address is probed
with a plain TCP connect first (``PROBE_S``): ``ray.init`` on a dead address retries for minutes, so an
unreachable cluster is one ``ConfigError`` naming ``resources.ray_address`` and the fix (``ray start --head``).

``describe()`` (Ray running) / ``local_cluster(device)`` (this machine, no Ray) give a ``ClusterInfo``: alive
nodes with CPUs and GPUs each, and the torch.distributed backends (NCCL/gloo) this process can use.
``validate_request(resources, cluster, device=)`` raises a one-line ``RequestError`` (a ``ConfigError``)
naming the key and the fix for a request the cluster cannot hold (more ranks than devices on a node, more
nodes than the cluster has, split placement without a training rank, CUDA ranks on nodes without GPUs).

Public names (stable): ``RequestError``, ``NodeInfo``, ``ClusterInfo``, ``connect``, ``describe``,
``local_cluster``, ``validate_request``, ``resolve_address``, ``probe_address``, ``ranks_per_node``, ``torch_backends``,
``local_gpu_count``, ``PROBE_S``.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass

from reasoning_rl.config import ConfigError
from reasoning_rl.config.resources import ResourcesConfig

PROBE_S = 3.0  # how long the TCP probe of a cluster address may take (Ray's own retry takes minutes)
GCS_PORT = 6379  # `ray start --head`'s default port
CLIENT_PORT = 10001  # Ray client server's default port (ray://)


class RequestError(ConfigError):
    """A resources request or cluster address that cannot work: ``problem`` and ``fix`` (the doctor shows them in
    two columns; the message is ``problem; fix``, one line)."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(f"{problem}; {fix}")
        self.problem = problem
        self.fix = fix


# Ray's workers are niced (15) unless the cluster says otherwise; a cluster the run joins is started with
# RAY_worker_niceness=0 `ray start ...` for the same reason (docs: README, several machines)
WORKER_NICENESS = 0
START_FIX = "start one with `ray start --head` (then `ray start --address=HEAD:6379` on the other nodes)"


@dataclass(frozen=True)
class NodeInfo:
    """One alive Ray node (or this machine before Ray runs)."""

    node_id: str
    ip: str
    cpus: float
    gpus: float


@dataclass(frozen=True)
class ClusterInfo:
    """Alive nodes and the collective backends; ``address`` None: this machine before Ray runs, ``'local'``: the
    run's own local Ray instance."""

    nodes: tuple[NodeInfo, ...]
    backends: tuple[str, ...]
    address: str | None = None

    @property
    def where(self) -> str:
        if self.address is None:
            return "this machine"
        return "the local Ray instance" if self.address == "local" else f"the Ray cluster at {self.address}"

    def summary(self) -> str:
        per_node = ", ".join(f"{n.ip} ({n.cpus:g} CPU, {n.gpus:g} GPU)" for n in self.nodes)
        return f"{len(self.nodes)} node(s): {per_node}; backends: {', '.join(self.backends) or 'none'}"


def local_gpu_count() -> int:
    """Visible CUDA devices of this process (0 without CUDA)."""
    import torch

    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def torch_backends() -> tuple[str, ...]:
    """torch.distributed backends this process can use: ``nccl`` (CUDA ranks) and ``gloo`` (CPU ranks)."""
    import torch.distributed as dist

    if not dist.is_available():
        return ()
    return tuple(
        name for name, ok in (("nccl", dist.is_nccl_available()), ("gloo", dist.is_gloo_available())) if ok
    )


def ranks_per_node(resources: ResourcesConfig, device: str, gpus_per_node: int | None = None) -> int:
    """``resources.ranks_per_node`` with None resolved: every GPU of a node on CUDA, 1 on CPU."""
    if resources.ranks_per_node is not None:
        return resources.ranks_per_node
    if device == "cuda":
        return max(local_gpu_count() if gpus_per_node is None else gpus_per_node, 1)
    return 1


def local_cluster(device: str) -> ClusterInfo:
    """This machine as a one-node cluster (what a local Ray instance started by the run will have)."""
    node = NodeInfo("local", _node_ip(), float(os.cpu_count() or 1), float(local_gpu_count()))
    return ClusterInfo((node,), torch_backends())


def describe(address: str | None = None) -> ClusterInfo:
    """The connected Ray cluster's alive nodes (``ray.nodes()``) and this process's backends."""
    import ray

    nodes = tuple(
        NodeInfo(
            str(n["NodeID"]),
            str(n.get("NodeManagerAddress", "?")),
            float(n.get("Resources", {}).get("CPU", 0.0)),
            float(n.get("Resources", {}).get("GPU", 0.0)),
        )
        for n in ray.nodes()
        if n.get("Alive")
    )
    return ClusterInfo(nodes, torch_backends(), address or "local")


def resolve_address(address: str) -> str:
    """``'auto'`` -> the address ``ray start`` left (``RAY_ADDRESS``, else Ray's current-cluster file); others
    unchanged. No cluster to find: ``ConfigError`` with the fix."""
    if address != "auto":
        return address
    env = os.environ.get("RAY_ADDRESS", "")
    if env and env != "auto":
        return env
    from ray._private.utils import read_ray_address  # the file `ray start --head` writes (no public API)

    found = read_ray_address()
    if not found:
        raise RequestError(
            "resources.ray_address='auto': no running Ray cluster on this machine (no RAY_ADDRESS, nothing "
            "started by `ray start`)",
            f"{START_FIX}, or set resources.ray_address=HOST:PORT",
        )
    return found


def _host_port(address: str) -> tuple[str, int]:
    client = address.startswith("ray://")
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep:
        return rest, CLIENT_PORT if client else GCS_PORT
    if not port.isdigit():
        raise RequestError(
            f"resources.ray_address={address!r}: the port {port!r} is not a number",
            "use 'auto', 'HOST:PORT' or 'ray://HOST:PORT'",
        )
    return host, int(port)


def probe_address(address: str, timeout_s: float = PROBE_S) -> None:
    """A TCP connect to the cluster's head within ``timeout_s``; refused or silent: ``ConfigError``."""
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        why = str(exc) or type(exc).__name__
    raise RequestError(
        f"resources.ray_address={address!r}: no Ray cluster answers at {host}:{port} ({why})",
        f"{START_FIX}, or check the address (HOST:PORT of the head, ray://HOST:10001 for Ray client)",
    )


def connect(resources: ResourcesConfig, *, world: int, device: str) -> bool:
    """Join ``resources.ray_address`` or start a local instance with room for ``world`` ranks; returns whether
    this call started Ray (the caller shuts it down). Already connected: nothing to do (False)."""
    import ray

    if ray.is_initialized():
        return False
    if resources.ray_address is None:
        # CPU ranks hold one CPU each for the whole run; the machine's CPUs stay free for the grading workers
        cpus = (os.cpu_count() or 1) + world if device != "cuda" else None
        # "local": a new instance even when another Ray runs on this machine (ray.init() would join that one).
        # Workers at nice 0, not Ray's default 15 (meant for background tasks): the ranks are the run's critical
        # path (vLLM's host loop, the update), and at 15 every grading worker or other process on the node took
        # precedence: beside two busy processes a rank got ~3 % of a core (2 cores, 2026-12-07)
        ray.init(
            address="local",
            num_cpus=cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            _system_config={"worker_niceness": WORKER_NICENESS},
        )
        return True
    address = resolve_address(resources.ray_address)
    probe_address(address)
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING)
    except ConnectionError as exc:
        raise RequestError(f"resources.ray_address={address!r}: {exc}", START_FIX) from None
    return True


def validate_request(resources: ResourcesConfig, cluster: ClusterInfo, *, device: str) -> None:
    """Refuse a request ``cluster`` cannot hold: one ``ConfigError`` naming the key and the fix."""
    nodes = resources.nodes
    have = len(cluster.nodes)
    if nodes > have:
        raise RequestError(
            f"resources.nodes={nodes} but {cluster.where} has {have} node(s)",
            "lower resources.nodes or join more nodes (`ray start --address=HEAD:6379` on each)",
        )
    cuda = device == "cuda"
    most_gpus = int(max((n.gpus for n in cluster.nodes), default=0))
    per_node = ranks_per_node(resources, device, most_gpus)
    world = nodes * per_node
    if resources.training_ranks(world) < 1:
        raise RequestError(
            f"resources.rollout_ranks={resources.rollout_ranks} leaves no training rank of {world} "
            f"({nodes} node(s) x {per_node})",
            "lower resources.rollout_ranks or raise resources.ranks_per_node",
        )
    if cuda:
        if most_gpus == 0:
            raise RequestError(
                f"run.device=cuda but no node of {cluster.where} has a GPU",
                "set run.device=cpu or join GPU nodes",
            )
        fit = sum(1 for n in cluster.nodes if n.gpus >= per_node)
        if fit < nodes:
            raise RequestError(
                f"resources.ranks_per_node={per_node} CUDA ranks need {per_node} GPUs on each of {nodes} node(s), "
                f"but only {fit} node(s) of {cluster.where} have that many (most: {most_gpus})",
                f"lower resources.ranks_per_node to {most_gpus} or less, or check CUDA_VISIBLE_DEVICES",
            )
        return
    if cluster.address is None:
        return  # a local instance started by the run gets one CPU slot per rank on top of the machine's
    fit = sum(1 for n in cluster.nodes if n.cpus >= per_node)
    if fit < nodes:
        most = int(max(n.cpus for n in cluster.nodes))
        raise RequestError(
            f"resources.ranks_per_node={per_node} CPU ranks need {per_node} CPUs on each of {nodes} node(s), but "
            f"only {fit} node(s) of {cluster.where} have that many (most: {most})",
            "lower resources.ranks_per_node or start the nodes with more --num-cpus",
        )


def _node_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
