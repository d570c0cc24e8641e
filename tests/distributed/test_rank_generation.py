"""Generation over Ray ranks outside the frontier (eval and tool waves: ``WorkerGroup.stream``): each rank
generates its share of the prompts with its share's offset (per-prompt seeds independent of the split) through
the typed ``EngineRank.generate`` call, the completions come back numbered as in the whole batch, the traffic is
counted per rank, and a rank that raises or dies in it is named (``WorkerFailure``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from reasoning_rl.distributed.faults import RankPlace, WorkerFailure
from reasoning_rl.distributed.group import WorkerGroup
from reasoning_rl.rollout import SamplingConfig

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
PROMPTS = [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]]  # 3 + 2 over two ranks


@pytest.fixture(scope="module")
def ray_up() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _group(ray: Any, fail_after: int | None = None, die: bool = False) -> tuple[WorkerGroup, list[Any]]:
    from reasoning_rl.distributed.launch import RankActor, RayRanks
    from tests.distributed.actors import GenerateWorker

    class Actor(RankActor):
        """The real rank actor, with the worker ``setup`` would have built replaced by a stand-in."""

        def __init__(self, rank: int) -> None:
            super().__init__()
            self.worker = GenerateWorker(fail_after if rank == 1 else None, die)  # type: ignore[assignment]

    actors = [ray.remote(num_cpus=0, max_restarts=0)(Actor).remote(r) for r in range(2)]
    ranks = RayRanks(actors, None, "PACK", timeout_s=30.0, owns_ray=False)
    ranks.places = [RankPlace(r, *ray.get(a.place.remote())) for r, a in enumerate(actors)]
    return WorkerGroup(ranks), actors


def test_each_rank_generates_its_share_numbered_as_in_the_batch(ray_up: Any) -> None:
    group, actors = _group(ray_up)
    got = group.generate(PROMPTS, SamplingConfig(n=1, prompt_offset=10))
    assert [c.prompt_index for c in got] == [0, 1, 2, 3, 4]
    assert [c.prompt_ids for c in got] == PROMPTS
    assert [c.token_ids[0] for c in got] == [10, 11, 12, 13, 14]  # each rank saw its share's offset
    traffic = group.take_traffic()
    assert traffic.to_workers > 0 and traffic.from_workers > 0
    assert set(traffic.seconds) == {("generate", 0), ("generate", 1)}
    for a in actors:
        ray_up.kill(a)


def test_a_rank_failing_in_generate_is_named(ray_up: Any) -> None:
    group, actors = _group(ray_up, fail_after=1)
    with pytest.raises(WorkerFailure, match="rank 1") as err:
        group.generate(PROMPTS, SamplingConfig(n=1))
    assert "engine broke after 1 completions" in str(err.value)
    for a in actors:
        ray_up.kill(a)


def test_a_rank_dying_in_generate_is_named(ray_up: Any) -> None:
    group, actors = _group(ray_up, fail_after=1, die=True)
    with pytest.raises(WorkerFailure, match="rank 1") as err:
        group.generate(PROMPTS, SamplingConfig(n=1))
    assert "rank 1 (node" in str(err.value) and "died" in str(err.value), str(err.value)
    for a in actors:
        ray_up.kill(a)
