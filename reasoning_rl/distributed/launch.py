"""Start a run's model workers: in this process for one rank, else as Ray actors on a placement group.

``resources.nodes x resources.ranks_per_node`` ranks (``ranks_per_node`` unset: every visible GPU on CUDA, 1 on
CPU). One rank and no ``resources.ray_address``: a ``ModelWorker`` built here, no Ray at all. Otherwise Ray:
``ray.init()`` (a local instance) or ``ray.init(address=resources.ray_address)`` (``ray start --head`` /
``ray start --address=...`` made the cluster); a placement group with one bundle per rank (``{"GPU": 1}`` on
CUDA, ``{"CPU": 1}`` on CPU), PACK on one node, SPREAD over several (STRICT_SPREAD with one rank per node);
one ``RankActor`` per bundle. Rank 0's node address and a free port there become every rank's
MASTER_ADDR/PORT for ``torch.distributed`` (NCCL on CUDA, gloo on CPU; timeout ``collective_timeout_s``).
Joining, describing the cluster and refusing a request it cannot hold are ``cluster``'s; every wait on the
actors is ``faults``' bounded one (a dead or hung rank: ``WorkerFailure`` naming it, its node and the last good
checkpoint).

Split placement (``resources.placement=split``): the last ``resources.rollout_ranks`` actors are rollout ranks
(``RolloutWorker``, bundle ``{"GPU": rollout.tensor_parallel_size}`` on CUDA), outside the training ranks' process
group; training rank 0 reaches them through a ``broadcast.HandoffGroup`` on a second free port of its node. With
``resources.share_gpus`` they are extra processes on the training ranks' GPUs (``rank_slots``).

Public names (stable): ``layout``, ``check_request``, ``check_tensor_parallel``, ``start_group``, ``RayRanks``,
``RankActor``, ``rank_slots``.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from rich.console import Console

from reasoning_rl import cluster
from reasoning_rl.config import ConfigError
from reasoning_rl.config.resources import ResourcesConfig
from reasoning_rl.distributed.broadcast import HandoffGroup
from reasoning_rl.distributed.faults import RankPlace, gather
from reasoning_rl.distributed.group import Traffic, WorkerGroup
from reasoning_rl.distributed.rank import EngineRank, RankArgs, apply, method_name
from reasoning_rl.distributed.rollout_worker import RolloutWorker
from reasoning_rl.distributed.worker import (
    CallResult,
    ModelWorker,
    WorkerSpec,
    join_process_group,
    node_address,
)
from reasoning_rl.factory import rollout_kind
from reasoning_rl.faults import fault_point
from reasoning_rl.handoff import HandoffStats
from reasoning_rl.trace import Progress

P = ParamSpec("P")
R = TypeVar("R")

PLACEMENT_WAIT_S = 60.0  # a placement group the cluster cannot hold never becomes ready: say so instead
# Starting a rank (a fresh process importing torch, then building and loading its shard) is not a collective and
# may take minutes for a large model: it gets at least this long; a rank that dies meanwhile still stops it at once.
STARTUP_WAIT_S = 900.0


def layout(resources: ResourcesConfig, device: str) -> tuple[int, int]:
    """(nodes, ranks per node) with ``ranks_per_node=None`` resolved for ``device``."""
    return resources.nodes, cluster.ranks_per_node(resources, device)


def start_group(spec: WorkerSpec, *, console: Console) -> WorkerGroup:
    """The run's ``WorkerGroup``: one in-process rank, or Ray actors (``resources``)."""
    res = spec.cfg.resources
    nodes, per_node = layout(res, spec.device)
    check_request(spec.cfg, nodes * per_node)
    check_tensor_parallel(spec.cfg, spec.device, per_node)
    if nodes * per_node == 1 and res.ray_address is None and res.placement == "colocated":
        return WorkerGroup.local(ModelWorker.build(spec))
    ranks = RayRanks.start(spec, nodes, per_node)
    where = f"{nodes} node(s) x {per_node} rank(s)" + (f" on {res.ray_address}" if res.ray_address else "")
    console.print(f"workers: {ranks.world} ranks ({where}), placement group {ranks.strategy}")
    if ranks.engines is not ranks.train_actors:
        beside = ", on the training ranks' GPUs" if res.share_gpus else ""
        console.print(f"rollout: {len(ranks.engines)} rollout rank(s) of their own (placement=split{beside})")
    for place in ranks.places:  # where each rank runs: what a failure names, and where to look
        console.print(f"  {place.describe()}")
    return WorkerGroup(ranks)


def check_request(cfg: Any, world: int) -> None:
    """Refuse, before any process starts, what this trainer cannot run on ``world`` ranks (split placement:
    ``resources.rollout_ranks`` of them generate only, the rest train; with ``share_gpus`` every one of them
    trains and the rollout ranks share their GPUs)."""
    res = cfg.resources
    rollout = res.rollout_ranks if res.placement == "split" else 0
    if res.share_gpus and rollout > world:
        raise ConfigError(
            f"resources.share_gpus with resources.rollout_ranks={rollout} but {world} training rank(s): each "
            "rollout rank shares one training rank's GPU; lower resources.rollout_ranks"
        )
    if res.training_ranks(world) < 1:
        raise ConfigError(
            f"resources.placement=split with resources.rollout_ranks={rollout} leaves no training rank of {world}:"
            " lower resources.rollout_ranks or raise resources.ranks_per_node / nodes"
        )
    world = res.training_ranks(world)
    rows = cfg.trainer.batch_size * cfg.rollout.n
    mini = cfg.algorithm.mini_batch_size or rows
    if min(rows, mini) < world:
        raise ConfigError(
            f"{world} ranks need at least {world} rows per update, but trainer.batch_size x rollout.n = {rows}"
            f" and algorithm.mini_batch_size = {mini}: raise them or lower resources.ranks_per_node / nodes"
        )


def check_tensor_parallel(cfg: Any, device: str, per_node: int) -> None:
    """Refuse a ``rollout.tensor_parallel_size`` this run cannot give its engines (one line naming the key)."""
    tp = cfg.rollout.tensor_parallel_size
    if tp == 1:
        return
    key = f"rollout.tensor_parallel_size={tp}"
    if device != "cuda":
        raise ConfigError(f"{key} needs CUDA (vLLM tensor parallel over GPUs); on {device} set it to 1")
    if rollout_kind(cfg) != "vllm":
        raise ConfigError(
            f"{key} needs rollout.engine=vllm (the {rollout_kind(cfg)} engine has no tensor parallel)"
        )
    if per_node % tp:
        raise ConfigError(f"{key} must divide resources.ranks_per_node={per_node}: pick a divisor of it")
    if cfg.resources.placement != "split":
        raise ConfigError(
            f"{key} needs resources.placement=split (a colocated rank holds one GPU; a split rollout rank gets {tp})"
        )
    if cfg.resources.share_gpus:
        raise ConfigError(
            f"{key} with resources.share_gpus: a rollout rank shares one training rank's GPU; set it to 1"
        )


@dataclass(frozen=True)
class Slot:
    """Where one rank's actor goes: its bundle of the placement group and the resources it takes there."""

    bundle: int
    cpus: float
    gpus: float


def rank_slots(
    world: int, rollout: int, *, gpu: bool, tp: int, share: bool
) -> tuple[list[dict[str, float]], list[Slot]]:
    """The placement group's bundles and one ``Slot`` per rank (training ranks first, then the rollout ranks):
    a bundle per rank (``{"GPU": 1}``, a rollout rank's ``{"GPU": tp}``; ``{"CPU": 1}`` on CPU), or with
    ``share`` a bundle per training rank that rollout rank i shares with training rank i, each actor taking half
    of its GPU: Ray hands both the bundle's one device (a fractional bundle alone could put two training ranks
    on one GPU)."""
    one = {"GPU": 1.0} if gpu else {"CPU": 1.0}
    own = Slot(0, 0.0, 1.0) if gpu else Slot(0, 1.0, 0.0)
    if share:
        half = (
            Slot(0, 0.0, 0.5) if gpu else Slot(0, 0.0, 0.0)
        )  # on CPU the rollout actor takes no slot of its own
        first = half if gpu else own
        slots = [dc_replace(first, bundle=r) for r in range(world)]
        slots += [dc_replace(half, bundle=i) for i in range(rollout)]
        return [dict(one) for _ in range(world)], slots
    engine = {"GPU": float(tp)} if gpu else one
    bundles = [dict(one) for _ in range(world)] + [dict(engine) for _ in range(rollout)]
    slots = [dc_replace(own, bundle=r) for r in range(world)]
    slots += [Slot(world + i, own.cpus, float(tp) if gpu else 0.0) for i in range(rollout)]
    return bundles, slots


class RankActor:
    """The Ray actor of one rank: joins the process group, builds its ``ModelWorker``, runs its calls."""

    def __init__(self) -> None:
        self.worker: ModelWorker | RolloutWorker | None = None  # RolloutWorker: a split rollout rank

    def place(self) -> tuple[str, str, int]:
        """(node IP, Ray node id, pid) of this rank's process."""
        import ray

        return node_address(), ray.get_runtime_context().get_node_id(), os.getpid()

    def address(self) -> tuple[str, int]:
        """This node's address and a free port on it (rank 0's become MASTER_ADDR/PORT)."""
        with socket.socket() as s:
            s.bind(("", 0))
            return node_address(), int(s.getsockname()[1])

    def setup(
        self,
        spec: WorkerSpec,
        rank: int,
        world: int,
        master: tuple[str, int],
        handoff: tuple[tuple[str, int], int] | None = None,
    ) -> str:
        """A training rank; with ``handoff`` (split placement: its master and size) rank 0 is its sender."""
        timeout = spec.cfg.resources.collective_timeout_s
        join_process_group(rank, world, master[0], master[1], timeout)
        group = HandoffGroup(0, handoff[1], handoff[0], timeout) if handoff and rank == 0 else None
        self.worker = ModelWorker.build(spec, rank=rank, handoff=group)
        return node_address()

    def setup_rollout(
        self, spec: WorkerSpec, rank: int, member: int, handoff: tuple[tuple[str, int], int]
    ) -> str:
        """A split rollout rank: member ``member`` of the hand-off group, no training process group."""
        group = HandoffGroup(member, handoff[1], handoff[0], spec.cfg.resources.collective_timeout_s)
        self.worker = RolloutWorker.build(spec, group, rank=rank)
        return node_address()

    def call(self, method: Callable[..., Any], args: RankArgs[...]) -> CallResult:
        """One call of the driver's (``_submit``), run as an in-process rank runs its own (``rank.apply``)."""
        if self.worker is None:
            raise RuntimeError("RankActor.call before setup")
        start = time.perf_counter()
        value = apply(self.worker, method, args)
        seconds = time.perf_counter() - start
        return CallResult(value, seconds, len(pickle.dumps(value)))


class RayRanks:
    """A group's ranks as Ray actors on the run's placement group (``rank_slots``: rank r on bundle r, or with
    ``resources.share_gpus`` rollout rank i on training rank i's bundle)."""

    def __init__(
        self,
        actors: list[Any],
        pg: Any,
        strategy: str,
        *,
        timeout_s: float,
        owns_ray: bool,
        train: int | None = None,
    ) -> None:
        self.actors = actors  # training ranks first, then split placement's rollout ranks
        self.train_actors = actors[:train] if train is not None else actors
        self.engines = actors[train:] if train is not None else actors  # the ranks that generate
        self.pg = pg
        self.strategy = strategy
        self.timeout_s = timeout_s
        self.owns_ray = owns_ray
        self.nodes: list[str] = []
        self.places: list[RankPlace] = []
        self.checkpoints: Path | None = None  # the run's checkpoints dir: a failure names its latest

    @property
    def world(self) -> int:
        """Training ranks (the rows of every model call are split over them)."""
        return len(self.train_actors)

    @classmethod
    def start(cls, spec: WorkerSpec, nodes: int, per_node: int) -> RayRanks:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        res = spec.cfg.resources
        rollout = res.rollout_ranks if res.placement == "split" else 0
        world = res.training_ranks(nodes * per_node)  # split placement's rollout ranks come after them
        owns = cluster.connect(res, world=world + rollout, device=spec.device)
        try:
            cluster.validate_request(res, cluster.describe(res.ray_address), device=spec.device)
        except ConfigError:
            if owns:
                ray.shutdown()
            raise
        gpu = spec.device == "cuda"
        strategy = "PACK" if nodes == 1 else ("STRICT_SPREAD" if per_node == 1 else "SPREAD")
        tp = spec.cfg.rollout.tensor_parallel_size if gpu else 1  # a rollout rank's engine: tp GPUs
        bundles, slots = rank_slots(world, rollout, gpu=gpu, tp=tp, share=res.share_gpus)
        pg = placement_group(bundles, strategy=strategy)
        ready, _ = ray.wait([pg.ready()], timeout=PLACEMENT_WAIT_S)
        if not ready:
            have = ray.cluster_resources()
            ray.util.remove_placement_group(pg)
            if owns:
                ray.shutdown()
            raise ConfigError(
                f"resources: {world + rollout} ranks ({nodes} node(s) x {per_node}) of {bundles} ({strategy}) do not fit the "
                f"Ray cluster (it has {have}); lower resources.nodes / resources.ranks_per_node or add nodes"
            )
        remote = ray.remote(RankActor)
        actors: list[Any] = [  # handles: their methods are called with .remote
            remote.options(
                num_cpus=slot.cpus,
                num_gpus=slot.gpus,
                runtime_env={"env_vars": _worker_env()},
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    pg, placement_group_bundle_index=slot.bundle
                ),
            ).remote()
            for slot in slots
        ]
        ranks = cls(
            actors,
            pg,
            strategy,
            timeout_s=res.collective_timeout_s,
            owns_ray=owns,
            train=world if rollout else None,
        )
        ranks.checkpoints = Path(spec.cfg.run_dir) / "checkpoints"
        try:
            ranks.places = [
                RankPlace(r, *place)
                for r, place in enumerate(
                    ranks._get([a.place.remote() for a in actors], "place", startup=True)
                )
            ]
            master, second = ranks._get(
                [actors[0].address.remote(), actors[0].address.remote()], "address", startup=True
            )
            handoff = (second, 1 + rollout) if rollout else None
            setups = [a.setup.remote(spec, r, world, master, handoff) for r, a in enumerate(actors[:world])]
            setups += [
                a.setup_rollout.remote(spec, world + i, 1 + i, handoff) for i, a in enumerate(actors[world:])
            ]
            ranks.nodes = ranks._get(setups, "setup", startup=True)
        except BaseException:
            ranks.close()
            raise
        return ranks

    def run(
        self,
        method: Callable[Concatenate[ModelWorker, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
        progress: Progress | None = None,
    ) -> list[R]:
        """Every training actor's call; ``progress`` cannot reach into an actor's process: unused."""
        return self._run(self.train_actors, method, per_rank, traffic)

    @property
    def engine_count(self) -> int:
        return len(self.engines)

    @property
    def _engine0(self) -> int:
        """The global rank of the first generating rank (split: after the training ranks)."""
        return len(self.actors) - len(self.engines)

    def run_engines(
        self,
        method: Callable[Concatenate[EngineRank, P], R],
        per_rank: Sequence[RankArgs[P]],
        traffic: Traffic,
    ) -> list[R]:
        """``method(*per_rank[r])`` on every generating rank r (the training ranks unless split)."""
        return self._run(self.engines, method, per_rank, traffic, first_rank=self._engine0)

    def handoff(self, version: int, bucket_bytes: int, traffic: Traffic) -> list[HandoffStats]:
        """New weights into every engine: colocated, each rank its own (``push_weights``); split, training
        rank 0 broadcasts to the rollout ranks (``send_weights`` / ``receive_weights``, all at once)."""
        if self.engines is self.train_actors:
            return self.run(ModelWorker.push_weights, [RankArgs(version, bucket_bytes)] * self.world, traffic)
        refs = [_submit(a, ModelWorker.send_weights, RankArgs(bucket_bytes)) for a in self.train_actors]
        refs += [_submit(a, RolloutWorker.receive_weights, RankArgs(version)) for a in self.engines]
        fault_point("handoff")  # a crash test's mid-hand-off (the driver's): every part issued, none returned
        results: list[CallResult] = self._get(refs, "hand-off")
        names = [method_name(ModelWorker.send_weights)] * self.world
        names += [method_name(RolloutWorker.receive_weights)] * len(self.engines)
        for rank, (name, res) in enumerate(zip(names, results, strict=True)):
            traffic.add(name, rank, 0, res)
        stats: list[HandoffStats] = [res.value for res in results]
        checks = [s.check for s in stats[self.world :] if s.check is not None]
        if checks:  # the step's record (rank 0's) carries the rollout ranks' gate: the worst probe gap
            stats[0] = dc_replace(stats[0], check=max(checks, key=lambda c: c.probe_gap))
        overlapped = [s.overlap_tokens for s in stats[self.world :] if s.overlap_tokens is not None]
        if overlapped:  # and what the live rollout ranks decoded during the update, all of them
            stats[0] = dc_replace(stats[0], overlap_tokens=sum(overlapped))
        return stats

    def _run(
        self,
        actors: list[Any],
        method: Callable[..., R],
        per_rank: Sequence[RankArgs[...]],
        traffic: Traffic,
        *,
        first_rank: int = 0,
    ) -> list[R]:
        """``method(*per_rank[r])`` on ``actors[r]`` (global rank ``first_rank + r``), waited for together."""
        name = method_name(method)
        sent = [len(pickle.dumps(args)) for args in per_rank]
        refs = [_submit(a, method, args) for a, args in zip(actors, per_rank, strict=True)]
        results: list[CallResult] = self._get(refs, name, first_rank=first_rank)
        for rank, (n, res) in enumerate(zip(sent, results, strict=True), start=first_rank):
            traffic.add(name, rank, n, res)
        return [res.value for res in results]

    def _get(self, refs: list[Any], method: str, *, startup: bool = False, first_rank: int = 0) -> list[Any]:
        wait = max(self.timeout_s, STARTUP_WAIT_S) if startup else self.timeout_s
        return gather(
            refs,
            self.places,
            what=method,
            timeout_s=wait,
            checkpoints=self.checkpoints,
            first_rank=first_rank,
        )

    def close(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for actor in self.actors:
            ray.kill(actor)
        ray.util.remove_placement_group(self.pg)
        if self.owns_ray:
            ray.shutdown()


def _submit(actor: Any, method: Callable[Concatenate[Any, P], object], args: RankArgs[P]) -> Any:
    """The one place a rank call leaves for a Ray actor (its ``RankActor.call``): the method reference and its
    arguments, checked against each other here as at the group."""
    return actor.call.remote(method, args)


def _worker_env() -> dict[str, str]:
    """What the rank processes must see like the driver: its import path (a source checkout) and thread caps."""
    keys = ("PYTHONPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    return {k: os.environ[k] for k in keys if k in os.environ}
