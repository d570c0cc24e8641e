"""The driver's bounded wait on rank actors: a dead, hung or failing rank becomes a ``WorkerFailure`` naming it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.distributed.faults import RankPlace, WorkerFailure, gather
from tests.distributed.actors import Rank

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.fixture(scope="module")
def ranks() -> Iterator[tuple[list, list[RankPlace]]]:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(num_cpus=0, max_restarts=0)(Rank)
    actors = [remote.remote() for _ in range(2)]
    places = [RankPlace(r, *ray.get(a.place.remote())) for r, a in enumerate(actors)]
    yield actors, places
    ray.shutdown()


def _fresh(ranks: tuple[list, list[RankPlace]], rank: int) -> None:
    """Replace actor ``rank`` after a test killed or hung it."""
    import ray

    actors, places = ranks
    ray.kill(actors[rank])
    actors[rank] = ray.remote(num_cpus=0, max_restarts=0)(Rank).remote()
    places[rank] = RankPlace(rank, *ray.get(actors[rank].place.remote()))


def _checkpoints(tmp_path: Path) -> Path:
    mgr = CheckpointManager(tmp_path / "checkpoints")
    mgr.save(3, lambda d: (d / "policy.pt").write_bytes(b"x"), {})
    return mgr.root


def test_answers_come_back_in_rank_order(ranks: tuple[list, list[RankPlace]]) -> None:
    actors, places = ranks
    refs = [actors[0].work.remote("slow", 1), actors[1].work.remote("ok", 2)]
    assert gather(refs, places, what="train_step", timeout_s=30) == [10, 20]


def test_a_rank_that_dies_is_named_with_its_node_and_checkpoint(
    ranks: tuple[list, list[RankPlace]], tmp_path: Path
) -> None:
    actors, places = ranks
    root = _checkpoints(tmp_path)
    with pytest.raises(WorkerFailure) as err:
        gather(  # a death is seen when it happens, never at the deadline: "died", not "did not answer"
            [actors[0].work.remote("slow", 1), actors[1].work.remote("die", 2)],
            places,
            what="train_step",
            timeout_s=600,
            checkpoints=root,
        )
    failure = err.value
    msg = str(failure)
    assert failure.rank == 1 and failure.place == places[1] and failure.checkpoint == root / "step_3"
    assert f"rank 1 (node {places[1].ip}" in msg and f"pid {places[1].pid}" in msg and "died" in msg
    assert str(root / "step_3") in msg and "trainer.resume=auto" in msg and "\n" not in msg
    _fresh(ranks, 1)


def test_a_call_on_later_ranks_only_names_them_right(ranks: tuple[list, list[RankPlace]]) -> None:
    """Split placement's rollout ranks come after the training ranks: a call on them alone (``first_rank``)
    gets its values in order and names the right rank when one dies."""
    actors, places = ranks
    assert gather(
        [actors[1].work.remote("ok", 4)], places, what="engine_wake", timeout_s=30, first_rank=1
    ) == [40]
    with pytest.raises(WorkerFailure) as err:
        gather([actors[1].work.remote("die", 2)], places, what="engine_wake", timeout_s=30, first_rank=1)
    assert err.value.rank == 1 and f"rank 1 (node {places[1].ip}" in str(err.value)
    _fresh(ranks, 1)


def test_a_hung_rank_is_stopped_at_the_deadline(ranks: tuple[list, list[RankPlace]]) -> None:
    actors, places = ranks
    start = time.monotonic()
    with pytest.raises(WorkerFailure) as err:
        gather(
            [actors[0].work.remote("hang", 1), actors[1].work.remote("ok", 2)],
            places,
            what="train_step",
            timeout_s=2,
        )
    took = time.monotonic() - start
    assert (
        took >= 2
    )  # the whole timeout (ray.wait may return a hair early); no upper bound: load stretches it
    msg = str(err.value)
    assert err.value.rank == 0 and "rank 0 (node" in msg and "did not answer within" in msg
    assert "collective_timeout_s=2 s" in msg and "no checkpoint yet" in msg
    _fresh(ranks, 0)


def test_a_collective_timeout_names_the_rank_that_never_joined(ranks: tuple[list, list[RankPlace]]) -> None:
    """Rank 1's collective timed out waiting for rank 0, which is still busy elsewhere: rank 0 is the cause."""
    actors, places = ranks
    with pytest.raises(WorkerFailure) as err:
        gather(
            [actors[0].work.remote("hang", 1), actors[1].work.remote("raise", 2)],
            places,
            what="train_step",
            timeout_s=30,
        )
    msg = str(err.value)
    assert (
        err.value.rank == 0 and "rank 1 (node" in msg and "Timed out waiting" in msg and "still busy" in msg
    )
    _fresh(ranks, 0)


def test_a_rank_dying_mid_save_leaves_no_half_written_checkpoint(
    ranks: tuple[list, list[RankPlace]], tmp_path: Path
) -> None:
    """The workers write into the atomic helper's temporary dir: a death there never publishes ``step_N``."""
    actors, places = ranks
    mgr = CheckpointManager(tmp_path / "checkpoints")
    mgr.save(1, lambda d: (d / "shard_0.pt").write_bytes(b"x"), {})

    def shards(directory: Path) -> None:
        refs = [a.save_shard.remote(str(directory), r, r == 1) for r, a in enumerate(actors)]
        gather(refs, places, what="save_checkpoint", timeout_s=60, checkpoints=mgr.root)

    with pytest.raises(WorkerFailure) as err:
        mgr.save(2, shards, {})
    assert err.value.rank == 1 and err.value.checkpoint == mgr.root / "step_1"
    assert [c.step for c in mgr.list()] == [1] and not (mgr.root / "step_2").exists()
    latest = mgr.resolve("auto")
    assert latest is not None and latest.step == 1  # what trainer.resume=auto continues from
    assert not list(mgr.root.glob(".tmp-*"))  # the helper removed the half-written temporary dir
    _fresh(ranks, 1)
