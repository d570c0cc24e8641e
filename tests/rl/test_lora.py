"""LoRA RL (model.lora): PEFT adapters on the policy, only they are optimised; the KL reference is the base model
with the adapters disabled; the hand-off streams merged weights under the base model's names."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import torch
from rrl_testutil import InProcessWire, two_ranks

from reasoning_rl.algorithms import LossConfig
from reasoning_rl.config import LoraConfig, load_config
from reasoning_rl.freshness import FreshnessGate, Probe, WeightSyncError
from reasoning_rl.handoff import push_weights
from reasoning_rl.policy import Policy, ReferencePolicy
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import make_engine

HERE = Path(__file__).resolve().parent
PROMPTS = [[7 + (i * 5 + k) % 60 for k in range(24)] for i in range(3)]


def _batch(seed: int) -> tuple[TokenBatch, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(7, 90, (20,), generator=g) for _ in range(4)]
    return TokenBatch(seqs, [10] * 4), torch.randn(4, generator=g)


def _train(policy: Policy, seed: int) -> dict[str, float]:
    batch, adv = _batch(seed)
    return policy.train_step(batch, adv, None, None, LossConfig())


@pytest.fixture()
def lora_policy(tiny_model_dir):
    return Policy.from_pretrained(
        str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256, lora=LoraConfig(rank=4)
    )


def test_only_adapter_parameters_are_trained_and_in_the_optimizer(lora_policy):
    total = sum(p.numel() for p in lora_policy.module.parameters())
    adapters = {n: p for n, p in lora_policy.lm.named_parameters() if ".lora_" in n}
    # 2 layers x 7 linear layers (q, k, v, o, gate, up, down), each A [4, in] + B [out, 4]; no LM head
    assert len(adapters) == 2 * 7 * 2
    frozen_before = {n: p.detach().clone() for n, p in lora_policy.lm.named_parameters() if ".lora_" not in n}
    metrics = [_train(lora_policy, s) for s in (1, 2)]
    in_optimizer = [p for g in lora_policy.optimizer.param_groups for p in g["params"]]
    assert {id(p) for p in in_optimizer} == {id(p) for p in adapters.values()}
    assert {id(p) for p in lora_policy.optimizer.state} == {id(p) for p in adapters.values()}
    counted = sum(p.numel() for p in in_optimizer)
    assert counted == sum(p.numel() for p in adapters.values()) and counted < total / 10
    for n, p in lora_policy.lm.named_parameters():  # the base stays exactly as loaded
        if n in frozen_before:
            assert torch.equal(p, frozen_before[n]), n
    assert metrics[0]["adapter_norm"] > 0 and metrics[1]["adapter_norm"] > metrics[0]["adapter_norm"]


def test_reference_with_adapters_disabled_equals_a_separate_base_model_exactly(lora_policy, tiny_model_dir):
    base = ReferencePolicy.from_pretrained(str(tiny_model_dir), micro_batch_tokens=256)
    batch, _ = _batch(7)
    for seed in (1, 2, 3):
        _train(lora_policy, seed)
    trained, _ = lora_policy.logprobs(batch)
    expected = base.logprobs(batch)
    assert not torch.allclose(trained, expected, atol=1e-3)  # the adapters did move the policy
    assert torch.equal(lora_policy.base_logprobs(batch), expected)
    assert torch.equal(lora_policy.logprobs(batch)[0], trained)  # adapters back on after the pass


@pytest.mark.parametrize(("kl", "reference"), [(0.0, None), (0.05, "AdapterOffReference")])
def test_lora_run_reference_is_the_policy_itself_or_none(tiny_model_dir, kl, reference):
    from reasoning_rl.factory import build_models

    cfg = load_config(
        None,
        [f"algorithm.kl_coef={kl}", "model.lora.rank=4"],
        base={"model": {"path": str(tiny_model_dir)}, "data": {"train": {"generator": "arithmetic"}}},
    )
    models = build_models(cfg, Path(tiny_model_dir), "cpu", "float32")
    assert models.policy.peft is not None
    assert (None if models.ref is None else type(models.ref).__name__) == reference
    if models.ref is not None:
        assert models.ref.policy is models.policy  # no second copy of the weights


def test_lora_config_errors_name_the_field(tiny_model_dir):
    from reasoning_rl.config import ConfigError

    base = {"model": {"path": str(tiny_model_dir)}, "data": {"train": {"generator": "arithmetic"}}}
    with pytest.raises(ConfigError, match="model.ref_offload: a LoRA run's reference"):
        load_config(None, ["model.lora.rank=4", "model.ref_offload=true", "algorithm.kl_coef=0.1"], base=base)
    with pytest.raises(ConfigError, match="model.lora.rank"):
        load_config(None, ["model.lora.rank=-1"], base=base)
    with pytest.raises(ConfigError, match=r"model.lora.target_modules=\['nope'\]"):
        Policy.from_pretrained(str(tiny_model_dir), lora=LoraConfig(rank=2, target_modules=["nope"]))


def test_merged_handoff_serves_the_trainers_policy_and_the_gate_covers_it(lora_policy, tiny_model_dir):
    engine = make_engine("hf", str(tiny_model_dir), max_model_len=128)
    gate = FreshnessGate(Probe.from_prompts(PROMPTS))
    base_names = [n for n, _ in engine.model.named_parameters()]
    for step in (1, 2):
        _train(lora_policy, step)
        before = {n: p.detach().clone() for n, p in lora_policy.lm.named_parameters()}
        stats = push_weights(lora_policy, engine, gate=gate, version=step)
        assert stats.check is not None and stats.check.probe_gap <= 1e-5
        assert stats.tensors == len(base_names)
        for n, p in lora_policy.lm.named_parameters():  # merging made new tensors: the trainer is untouched
            assert torch.equal(p, before[n]), n
    sent = [n for bucket in lora_policy.iter_full_params() for n, _ in bucket]
    assert sent == base_names  # the base model's names: an engine needs no LoRA support
    batch, _ = _batch(9)
    engine_lp = engine.score([s.tolist() for s in batch.sequences], batch.prompt_lens)
    trainer_lp, _ = lora_policy.logprobs(batch)
    for row, trow in zip(engine_lp, trainer_lp.tolist(), strict=True):
        assert row == pytest.approx(trow[: len(row)], abs=1e-4)

    name = "model.layers.1.self_attn.q_proj.weight"  # an adapted (merged) weight dropped on the way
    good = engine.load_weights

    def drop(it: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        good(((n, t) for n, t in it if n != name), version=version)

    _train(lora_policy, 3)
    engine.load_weights = drop
    with pytest.raises(WeightSyncError, match=rf"hand-off of step 3: tensor {name}: sent sum="):
        push_weights(lora_policy, engine, gate=gate, version=3)


@pytest.mark.slow
@pytest.mark.distributed
def test_two_process_fsdp2_lora_step_matches_single_process(tiny_model_dir, tmp_path):
    sys.path.insert(0, str(HERE))
    try:
        from fsdp_worker import run
    finally:
        sys.path.remove(str(HERE))
    single = run(str(tiny_model_dir), micro_batch_tokens=10_000, lora_rank=4)
    out = tmp_path / "dp2.pt"
    two_ranks(HERE / "fsdp_worker.py", str(tiny_model_dir), str(out), "20", "4")
    dp = torch.load(out, weights_only=False)
    assert dp["world"] == 2 and dp["metrics"]["micro_batches"] > 1
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "tokens", "adapter_norm"):
        assert dp["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-6), key
    total = sum(t.numel() for t in single["params"].values())
    assert dp["optimizer_params"] == single["optimizer_params"] < total / 5  # the adapters only (r=4 of 64)
    for name, p in single["params"].items():  # merged weights under the base names, equal across world sizes
        torch.testing.assert_close(dp["params"][name], p, atol=2e-6, rtol=1e-5)
        assert torch.equal(dp["params"][name], dp["engine_params"][name]), name


def test_tied_lm_head_cannot_be_adapted(tiny_model_dir):
    from reasoning_rl.config import ConfigError

    with pytest.raises(ConfigError, match=r"adapts the LM head \(lm_head\), which this model ties"):
        Policy.from_pretrained(
            str(tiny_model_dir), lora=LoraConfig(rank=2, target_modules=["q_proj", "lm_head"])
        )


def test_checkpoint_holds_only_the_adapters_and_resumes_exactly(lora_policy, tiny_model_dir, tmp_path):
    from reasoning_rl.policy.sharded import read_model_state

    for seed in (1, 2):
        _train(lora_policy, seed)
    lora_policy.save_sharded(tmp_path / "policy")
    saved = read_model_state(tmp_path / "policy")
    adapters = dict(lora_policy.lm.named_parameters())
    assert sorted(k.removeprefix("lm.") for k in saved) == sorted(n for n in adapters if ".lora_" in n)
    adapter_bytes = sum(t.numel() * t.element_size() for t in saved.values())
    on_disk = sum(f.stat().st_size for f in (tmp_path / "policy").iterdir())
    # the adapters + 2 AdamW moments, plus DCP's per-record overhead (~1.6 KiB per tensor, ~4 per adapter tensor
    # with AdamW's step) and its index: the adapters' order of magnitude, no base weight in it
    assert 3 * adapter_bytes <= on_disk < 3 * adapter_bytes + len(saved) * 4 * (2 << 10) + (64 << 10)

    other = Policy.from_pretrained(  # other adapter init: all of it must come from the checkpoint
        str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256, lora=LoraConfig(rank=4), seed=1
    )
    other.load_sharded(tmp_path / "policy")
    assert other.step == 2
    for p in (lora_policy, other):
        _train(p, 3)
    for name, value in other.lm.named_parameters():
        assert torch.equal(value, adapters[name]), name


def test_exported_adapter_dir_and_merged_model_generate_the_trainers_tokens(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from reasoning_rl.policy.lora import merge_adapter_dir, save_adapter_dir, write_adapter_config
    from reasoning_rl.tiny import build_tiny_model

    base_dir = build_tiny_model(tmp_path / "base", initializer_range=0.2)  # logits that depend on the input
    policy = Policy.from_pretrained(str(base_dir), lr=5e-2, micro_batch_tokens=256, lora=LoraConfig(rank=4))
    for seed in (1, 2, 3):
        _train(policy, seed)
    write_adapter_config(tmp_path / "manifest", policy.peft, base_dir)
    adapters = {n: t.clone() for bucket in policy.iter_adapter_params() for n, t in bucket}
    adapter_dir = save_adapter_dir(tmp_path / "adapter", tmp_path / "manifest", adapters)
    merged_dir = merge_adapter_dir(adapter_dir, tmp_path / "merged")

    prompts = torch.tensor([[10, 11, 12, 13], [20, 30, 40, 50]])
    greedy = {"max_new_tokens": 10, "do_sample": False, "use_cache": True}
    with torch.no_grad():
        trainer = policy.lm.generate(input_ids=prompts, **greedy)
        peft_model = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(base_dir), str(adapter_dir)
        )
        base_only = AutoModelForCausalLM.from_pretrained(base_dir).generate(input_ids=prompts, **greedy)
        assert torch.equal(peft_model.generate(input_ids=prompts, **greedy), trainer)
        assert torch.equal(
            AutoModelForCausalLM.from_pretrained(merged_dir).generate(input_ids=prompts, **greedy), trainer
        )
    assert not torch.equal(base_only, trainer)  # the adapters changed what the model says


def _split_handoff(policy: Policy, engine, step: int):
    """One split-placement hand-off in one process (rrl_testutil's queue wire): the trainer sends from a
    thread, the rollout side loads and checks; returns (sender stats, receiver stats)."""
    import threading

    from reasoning_rl.distributed.broadcast import receive_weights, send_weights

    wire = InProcessWire()
    sent: dict[str, object] = {}
    sender = threading.Thread(
        target=lambda: sent.update(
            stats=send_weights(
                policy, wire.end(0), bucket_bytes=1 << 12, gate=FreshnessGate(Probe.from_prompts(PROMPTS))
            )
        )
    )
    sender.start()
    try:
        gate = FreshnessGate.for_run(engine, PROMPTS, None)
        return receive_weights(engine, wire.end(1), gate=gate, version=step), sent
    finally:
        sender.join(60)


@pytest.fixture()
def wire_module():
    sys.path.insert(0, str(HERE))
    yield
    sys.path.remove(str(HERE))


def test_split_handoff_sends_only_the_adapters_and_a_dropped_one_stops_the_step(
    lora_policy, tiny_model_dir, wire_module
):
    engine = make_engine("hf", str(tiny_model_dir), max_model_len=128)
    adapter_bytes = sum(p.numel() * p.element_size() for p in lora_policy.trainable_parameters())
    for step in (1, 2):
        _train(lora_policy, step)
        received, sent = _split_handoff(lora_policy, engine, step)
        assert received.bytes == sent["stats"].bytes == adapter_bytes  # the adapters' bytes, not the model's
        assert received.tensors == 2 * 7 * 2
        assert received.check is not None and received.check.probe_gap <= 1e-5
    batch, _ = _batch(9)  # the engine = base + the live adapter = the trainer's policy
    engine_lp = engine.score([s.tolist() for s in batch.sequences], batch.prompt_lens)
    for row, trow in zip(engine_lp, lora_policy.logprobs(batch)[0].tolist(), strict=True):
        assert row == pytest.approx(trow[: len(row)], abs=1e-4)

    name = "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"
    good = engine.load_adapter
    engine.load_adapter = lambda it, config, *, version: good(
        ((n, t) for n, t in it if n != name), config, version=version
    )
    _train(lora_policy, 3)
    with pytest.raises(WeightSyncError, match=rf"hand-off of step 3: tensor {name}: sent sum="):
        _split_handoff(lora_policy, engine, 3)


@pytest.mark.slow
@pytest.mark.vllm
def test_split_handoff_into_vllm_lora(lora_policy, tiny_model_dir, wire_module, tmp_path, monkeypatch):
    """vLLM CPU serves the base + the adapter with its LoRA kernels (enable_lora): the gate passes, the probe
    gap is fp32 noise, and an adapter tensor dropped before vLLM loads the adapter fails the step by name.
    Issue 41: the adapter directory vLLM loads from is removed when the adapter is replaced and at ``close``."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the engine writes its adapter dirs
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine(
        "vllm",
        str(tiny_model_dir),
        max_model_len=128,
        kv_cache_memory_bytes=64 << 20,
        enable_lora=True,
        max_loras=1,
        max_lora_rank=8,
    )
    dirs = []
    for step in (1, 2):
        _train(lora_policy, step)
        received, _ = _split_handoff(lora_policy, engine, step)
        assert received.check is not None and received.check.probe_gap < 1e-4
        dirs.append(sorted(tmp_path.glob("rrl-lora-*")))
    assert len(dirs[0]) == len(dirs[1]) == 1 and dirs[0] != dirs[1]  # the replaced adapter's dir is gone
    name = "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"
    good = engine.load_adapter
    engine.load_adapter = lambda it, config, *, version: good(
        ((n, t) for n, t in it if n != name), config, version=version
    )
    _train(lora_policy, 3)
    with pytest.raises(
        WeightSyncError, match=rf"hand-off of step 3: tensor {name}: the engine has no parameter"
    ):
        _split_handoff(lora_policy, engine, 3)
    engine.close()
    assert not list(tmp_path.glob("rrl-lora-*"))


def test_adapters_are_refused_on_other_base_weights(lora_policy, tiny_model_dir, tmp_path):
    import shutil

    from reasoning_rl.config import ConfigError
    from reasoning_rl.policy.lora import check_base, write_adapter_config

    write_adapter_config(tmp_path / "adapter", lora_policy.peft, tiny_model_dir)
    check_base(tmp_path / "adapter", tiny_model_dir)  # the same base: accepted
    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "other"))
    from safetensors.torch import load_file, save_file

    weights = load_file(other / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"] + 1e-3
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match=r"model.path=.*other: its weights \(sha256 \w+\) are not the base"):
        check_base(tmp_path / "adapter", other)
    with pytest.raises(ConfigError, match="holds no LoRA adapters"):
        check_base(tmp_path / "nothing" / "adapter", tiny_model_dir)
