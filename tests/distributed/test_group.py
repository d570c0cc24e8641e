"""The group's split / gather in one process: contiguous deterministic shards, results back in the original
order and layout, and generation independent of how prompts are split (``SamplingConfig.prompt_offset``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from reasoning_rl.distributed.group import Traffic, WorkerGroup, shards
from reasoning_rl.distributed.rank import EngineRank, RankArgs, method_name
from reasoning_rl.distributed.views import GroupEngine, PolicyView
from reasoning_rl.distributed.worker import CallResult, ModelWorker
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import Completion, SamplingConfig


def test_shards_are_contiguous_and_balanced() -> None:
    assert shards(7, 3) == [range(0, 3), range(3, 5), range(5, 7)]
    assert shards(4, 2) == [range(0, 2), range(2, 4)]
    assert shards(2, 3) == [range(0, 1), range(1, 2), range(2, 2)]


class FakeRanks:
    """``world`` ranks in this process; ``policy_logprobs`` returns each row's first token id on every
    response position (so a wrong gather shows which row went where), ``generate`` numbers prompts locally."""

    def __init__(self, world: int) -> None:
        self._world = world
        self.seen: list[list[int]] = []

    @property
    def world(self) -> int:
        return self._world

    @property
    def engine_count(self) -> int:
        return self._world

    def run(
        self, method: Any, per_rank: Sequence[RankArgs[...]], traffic: Traffic, progress: Any = None
    ) -> list[Any]:
        assert method is ModelWorker.policy_logprobs and progress is None
        out = []
        for rank, (batch, _entropy) in enumerate(a.args for a in per_rank):
            self.seen.append([int(s[0]) for s in batch.sequences])
            mask = batch.response_mask.float()
            value = torch.tensor([float(s[0]) for s in batch.sequences])[:, None] * mask
            out.append((value, None))
            traffic.add(method_name(method), rank, 1, CallResult(None, 0.0, 1))
        return out

    def run_engines(self, method: Any, per_rank: Sequence[RankArgs[...]], traffic: Traffic) -> list[Any]:
        assert method is EngineRank.generate
        out = []
        for prompts, sampling in (a.args for a in per_rank):
            self.seen.append([p[0] for p in prompts])
            out.append(
                [
                    Completion(i, 0, p, [sampling.prompt_offset + i], [0.0], "", "stop")
                    for i, p in enumerate(prompts)
                ]
            )
        return out

    def close(self) -> None:
        return None


def test_policy_view_splits_rows_and_gathers_them_in_order() -> None:
    lens = [4, 2, 6, 3, 5]  # responses of uneven length: shards are trimmed to their own longest
    batch = TokenBatch([torch.arange(10 * i, 10 * i + 2 + n) for i, n in enumerate(lens)], [2] * 5)
    ranks = FakeRanks(2)
    group = WorkerGroup(ranks)
    logp, ent = PolicyView(group).logprobs(batch)
    assert ranks.seen == [[0, 10, 20], [30, 40]]
    want = torch.tensor([10.0 * i for i in range(5)])[:, None] * batch.response_mask.float()
    assert ent is None and torch.equal(logp, want)
    traffic = group.take_traffic()
    assert traffic.to_workers == 2 and traffic.seconds.keys() == {
        ("policy_logprobs", 0),
        ("policy_logprobs", 1),
    }
    assert group.take_traffic().to_workers == 0


def test_too_small_a_batch_names_the_rank_count() -> None:
    batch = TokenBatch([torch.arange(4)], [2])
    with pytest.raises(ValueError, match="1 rows cannot be split over 2 ranks"):
        PolicyView(WorkerGroup(FakeRanks(2))).logprobs(batch)


def test_group_engine_numbers_completions_as_in_the_request() -> None:
    prompts = [[1], [2], [3], [4], [5]]
    ranks = FakeRanks(2)
    got = GroupEngine(WorkerGroup(ranks)).generate(prompts, SamplingConfig(max_tokens=1, seed=0))
    assert ranks.seen == [[1, 2, 3], [4, 5]]  # each rank its contiguous share, with its offset
    assert [(c.prompt_index, c.prompt_ids, c.token_ids) for c in got] == [
        (i, p, [i]) for i, p in enumerate(prompts)
    ]


def test_hf_engine_samples_the_same_whatever_the_split(tiny_model_dir: Path) -> None:
    """Per-prompt seeds follow the prompt's place in the whole batch (fails without ``prompt_offset``)."""
    from reasoning_rl.rollout.hf_engine import HFEngine

    engine = HFEngine(str(tiny_model_dir), dtype="float32", device="cpu")
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12]]
    sampling = SamplingConfig(n=2, max_tokens=5, temperature=1.0, seed=3)
    whole = [(c.prompt_index, c.sample_index, c.token_ids) for c in engine.generate(prompts, sampling)]
    parts = engine.generate(prompts[:2], sampling) + engine.generate(
        prompts[2:], sampling.model_copy(update={"prompt_offset": 2})
    )
    split = [
        (c.prompt_index + (2 if k >= 4 else 0), c.sample_index, c.token_ids) for k, c in enumerate(parts)
    ]
    assert split == whole
    assert len({tuple(t) for _, _, t in whole}) > 1  # sampled, not one repeated answer


def _config(**override: dict[str, Any]) -> Any:
    from reasoning_rl.config import Config

    base: dict[str, Any] = {
        "model": {"path": "m"},
        "data": {"train": {"generator": "fixed_digit", "size": 4}},
        "trainer": {"batch_size": 2},
        "rollout": {"n": 4},
    }
    for key, value in override.items():
        base[key] = {**base.get(key, {}), **value}
    return Config.model_validate(base)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"resources": {"placement": "split", "rollout_ranks": 3}}, "leaves no training rank of 3"),
        (  # split: the rows are spread over the 2 training ranks only
            {"resources": {"placement": "split", "rollout_ranks": 1}, "algorithm": {"mini_batch_size": 1}},
            "2 ranks need at least 2 rows",
        ),
        ({"trainer": {"batch_size": 1}, "rollout": {"n": 2}}, "3 ranks need at least 3 rows"),
        ({"algorithm": {"mini_batch_size": 2}}, "mini_batch_size = 2"),
    ],
)
def test_impossible_requests_are_refused_before_anything_starts(override: dict, message: str) -> None:
    from reasoning_rl.config import ConfigError
    from reasoning_rl.distributed.launch import check_request

    with pytest.raises(ConfigError, match=message):
        check_request(_config(**override), 3)
    check_request(_config(), 3)  # 8 rows over 3 ranks: fine
