"""``rollout.engine_process``: vLLM's engine core in a process of its own, the weights shipped to it per bucket
through memory both processes map (``rollout/vllm_transfer.py``)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from reasoning_rl.rollout.buckets import buckets
from reasoning_rl.rollout.vllm_transfer import Bucket, Packed, load_bucket, unpack
from tests.distributed.test_group import _config as group_config

MIXED = [
    ("a", torch.arange(6, dtype=torch.float32).reshape(2, 3)),
    ("b", torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)),
    ("c", torch.tensor(7, dtype=torch.int64)),
    ("d", torch.randn(5, 7, dtype=torch.float16)),
]


def test_a_bucket_round_trips_every_dtype_and_shape_and_its_file_goes_with_it() -> None:
    packed = Packed(MIXED)
    path = packed.bucket.path
    assert path is not None and Path(path).exists() and packed.bucket.cuda is None
    assert all(s.offset % 64 == 0 for s in packed.bucket.slots)
    buffer, back = unpack(pickle.loads(pickle.dumps(packed.bucket)))  # as the worker gets it, another mapping
    assert [n for n, _ in back] == [n for n, _ in MIXED]
    for (_, sent), (_, got) in zip(MIXED, back, strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape and torch.equal(got, sent)
    del buffer, back
    packed.close()
    assert not Path(path).exists()


def test_buckets_hold_whole_tensors_up_to_the_size_and_none_means_one() -> None:
    named = [(str(i), torch.zeros(n, dtype=torch.uint8)) for i, n in enumerate([40, 40, 200, 10, 10])]
    sizes = [[n for n, _ in g] for g in buckets(named, 128)]
    assert sizes == [["0", "1"], ["2"], ["3", "4"]]  # two of 40 fit 128, 200 goes alone
    assert [[n for n, _ in g] for g in buckets(named, None)] == [["0", "1", "2", "3", "4"]]


class _Model(torch.nn.Module):
    """A served model's stand-in: ``load_weights`` copies into its parameters, as vLLM's loaders do."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.zeros(2, 3))
        self.d = torch.nn.Parameter(torch.zeros(5, 7, dtype=torch.float16))

    def load_weights(self, weights: Any) -> None:
        params = dict(self.named_parameters())
        for name, t in weights:
            params[name].data.copy_(t)


class _Worker:
    def __init__(self) -> None:
        self.model = _Model()
        self.reloaded: list[str] = []

    def get_model(self) -> torch.nn.Module:
        return self.model

    def reload_weights(self, weights_iterator: Any, is_checkpoint_format: bool) -> None:
        self.reloaded = [name for name, _ in weights_iterator]


def test_the_worker_copies_a_bucket_in_place_or_hands_it_to_the_reload_whole() -> None:
    sent = [MIXED[0], MIXED[3]]
    packed = Packed(sent)
    worker = _Worker()
    try:
        assert load_bucket(worker, pickle.dumps(packed.bucket), True) == 2
        assert torch.equal(worker.model.a, sent[0][1]) and torch.equal(worker.model.d, sent[1][1])
        assert load_bucket(worker, pickle.dumps(packed.bucket), False) == 2 and worker.reloaded == ["a", "d"]
        with pytest.raises(TypeError, match="not a Bucket"):
            load_bucket(worker, pickle.dumps({"slots": ()}), True)
    finally:
        packed.close()
    assert isinstance(packed.bucket, Bucket)


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"max_lag": 1}, r"rollout\.max_lag=1"),
        ({"speculative": {"method": "ngram"}}, r"rollout\.speculative"),
        ({"engine": "hf"}, r"rollout\.engine=hf"),
    ],
)
def test_what_needs_the_in_process_core_is_refused_in_one_line(rollout: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        group_config(rollout={"engine_process": True, **rollout})
    assert "rollout.engine_process=true cannot be used" in str(err.value)
    group_config(rollout={"engine_process": False, **rollout})


def test_the_plan_counts_the_engine_process_context_and_the_shipped_bucket(tmp_path: Path) -> None:
    """The engine process's CUDA context stays on the device through the update (vLLM asleep or not), and the
    hand-off holds a second bucket (the copy the engine maps)."""
    pytest.importorskip("transformers")
    from reasoning_rl.memory_plan.plan import DEVICE_RESERVE, plan_run
    from tests.rl.test_memory_plan import QWEN15, tiny_config
    from tests.rl.test_memory_plan_step import RUN

    def plan(process: bool) -> Any:
        cfg, shape = tiny_config(
            tmp_path,
            QWEN15,
            rollout={"max_tokens": 8192, "engine_process": process},
            trainer={"batch_size": 8},
        )
        return plan_run(cfg, shape, **RUN), shape

    (own, shape), (inproc, _) = plan(True), plan(False)
    assert own.fits and inproc.fits and own.engine is not None and inproc.engine is not None
    assert own.update["engine"] == inproc.update["engine"] + DEVICE_RESERVE
    # one more bucket: rollout.handoff_bucket_mb, or the largest tensor (the bf16 embedding here) when bigger
    assert own.buckets == inproc.buckets + max(256 << 20, 2 * shape.vocab * shape.hidden)
    assert own.micro_batch_tokens < inproc.micro_batch_tokens  # the update's largest budget beside it


def _dropping(name: str, load: Any) -> Any:
    """An engine's ``load_weights`` that never delivers tensor ``name``."""
    return lambda it, *, version: load(((n, t) for n, t in it if n != name), version=version)


@pytest.mark.vllm
@pytest.mark.slow
def test_an_engine_core_in_its_own_process_serves_exactly_the_weights_sent(tiny_model_dir: Path) -> None:
    """Through the product's hand-off and freshness gate: the checksums are read back in the engine's process,
    so a dropped tensor fails the gate there too; greedy generations equal the in-process engine's given the
    same trained weights."""
    from reasoning_rl.freshness import FreshnessGate, WeightSyncError
    from reasoning_rl.handoff import push_weights
    from reasoning_rl.policy import Policy
    from reasoning_rl.rollout import SamplingConfig, make_engine
    from tests.rl.test_freshness import PROMPTS, _train

    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256)
    own = make_engine(
        "vllm", str(tiny_model_dir), max_model_len=128, kv_cache_memory_bytes=64 << 20, engine_process=True
    )
    assert own._scheduler() is None  # the core is not in this process
    gate = FreshnessGate.for_run(own, PROMPTS, None)
    _train(policy, 1)
    stats = push_weights(policy, own, gate=gate, version=1)
    assert stats.check is not None and stats.check.probe_gap < 1e-4 and own.version == 1
    greedy = SamplingConfig(n=1, max_tokens=12, temperature=0.0)
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    served = [c.token_ids for c in own.generate(prompts, greedy)]
    _train(policy, 2)
    own.load_weights = _dropping("model.norm.weight", own.load_weights)  # type: ignore[method-assign]
    with pytest.raises(WeightSyncError, match=r"step 2: tensor model\.norm\.weight"):
        push_weights(policy, own, gate=gate, version=2)
    own.close()  # its engine process ends here
    inproc = make_engine("vllm", str(tiny_model_dir), max_model_len=128, kv_cache_memory_bytes=64 << 20)
    assert inproc._scheduler() is not None
    reference = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256)
    _train(reference, 1)
    push_weights(reference, inproc, version=1)
    assert [c.token_ids for c in inproc.generate(prompts, greedy)] == served


def test_an_engine_that_resolves_to_hf_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``rollout.engine=auto`` picks hf where vLLM is not installed: the config cannot know, the factory says so."""
    from reasoning_rl import factory
    from reasoning_rl.config import ConfigError

    monkeypatch.setattr(factory, "rollout_kind", lambda cfg: "hf")
    cfg = group_config(rollout={"engine_process": True})
    with pytest.raises(
        ConfigError, match="rollout.engine_process=true needs the vllm engine; this run's is hf"
    ):
        factory.engine_for(cfg, tmp_path, "cpu", 64, dtype="float32")
