"""Completions come back from the rank actors one by one (a Ray streaming generator per rank), so the driver
can grade the first while every rank still generates: the one-rank path's overlap, across ranks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reasoning_rl.distributed.faults import RankPlace, WorkerFailure
from reasoning_rl.distributed.group import WorkerGroup
from reasoning_rl.rollout import SamplingConfig

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
DELAY = 2.0  # each rank's second completion comes this long after its first


@pytest.fixture(scope="module")
def ray_up() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _group(
    ray: Any, fail_after: int | None = None, die: bool = False, gate: str | None = None
) -> tuple[WorkerGroup, list[Any]]:
    from reasoning_rl.distributed.launch import RankActor, RayRanks
    from tests.distributed.actors import SlowStreamWorker

    class Actor(RankActor):
        """The real rank actor, with the worker ``setup`` would have built replaced by a slow stand-in."""

        def __init__(self, rank: int) -> None:
            super().__init__()
            self.worker = SlowStreamWorker(DELAY, fail_after if rank == 1 else None, die, gate)

    actors = [ray.remote(num_cpus=0, max_restarts=0)(Actor).remote(r) for r in range(2)]
    ranks = RayRanks(actors, None, "PACK", timeout_s=30.0, owns_ray=False)
    ranks.places = [RankPlace(r, *ray.get(a.place.remote())) for r, a in enumerate(actors)]
    return WorkerGroup(ranks), actors


def test_first_completion_arrives_before_any_rank_finishes(ray_up: Any, tmp_path: Path) -> None:
    """Each rank's second completion waits for a gate the test opens only once the first completion is here:
    whole shares would never come back (the stream would time out), however fast or loaded the machine."""
    gate = tmp_path / "gate"
    group, actors = _group(ray_up, gate=str(gate))
    prompts = [[1, 2], [3, 4], [5, 6], [7, 8]]  # 2 per rank
    arrivals = []
    for c in group.stream(prompts, SamplingConfig(n=1)):
        arrivals.append((gate.exists(), c))
        gate.touch()
    assert arrivals[0][0] is False  # the first came while every rank still held its second back
    assert sorted(c.prompt_index for _, c in arrivals) == [0, 1, 2, 3]
    assert sorted(c.token_ids[0] for _, c in arrivals) == [0, 1, 2, 3]  # each rank saw its offset
    traffic = group.take_traffic()
    assert traffic.to_workers > 0 and traffic.from_workers > 0 and {r for _, r in traffic.seconds} == {0, 1}
    for a in actors:
        ray_up.kill(a)


def test_a_rank_failing_mid_stream_is_named(ray_up: Any) -> None:
    group, actors = _group(ray_up, fail_after=1)
    got = []
    with pytest.raises(WorkerFailure, match="rank 1") as err:
        for comp in group.stream([[1, 2], [3, 4], [5, 6], [7, 8]], SamplingConfig(n=1)):
            got.append(comp)
    assert "engine broke after 1 completions" in str(err.value)
    assert got  # what came before the failure was delivered
    for a in actors:
        ray_up.kill(a)


def test_a_rank_dying_mid_stream_is_named(ray_up: Any) -> None:
    group, actors = _group(ray_up, fail_after=1, die=True)
    with pytest.raises(WorkerFailure, match="rank 1") as err:
        list(group.stream([[1, 2], [3, 4], [5, 6], [7, 8]], SamplingConfig(n=1)))
    assert "rank 1 (node" in str(err.value) and "died" in str(err.value), str(err.value)
    for a in actors:
        ray_up.kill(a)
