"""The freshness gate: a broken hand-off (dropped, renamed or stale tensor, or an engine that computes
differently) fails on the very hand-off it happens, naming the tensor or the probe gap; a correct one passes."""

from __future__ import annotations

import os
from collections.abc import Iterable
from functools import partial

import pytest
import torch
from rrl_testutil import InProcessWire

from reasoning_rl.algorithms import LossConfig
from reasoning_rl.freshness import FreshnessGate, Probe, WeightSyncError
from reasoning_rl.handoff import push_weights
from reasoning_rl.policy import Policy
from reasoning_rl.policy.batch import TokenBatch
from reasoning_rl.rollout import Request, SamplingConfig, make_engine
from reasoning_rl.rollout.fingerprints import (
    EngineWeights,
    compare_fingerprints,
    engine_name,
    fingerprint_tensors,
)

PROMPTS = [[7 + (i * 5 + k) % 60 for k in range(24)] for i in range(3)]


def _train(policy: Policy, seed: int) -> None:
    """One real optimizer step, so every tensor moves (what the next hand-off must deliver)."""
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(7, 90, (20,), generator=g) for _ in range(4)]
    batch = TokenBatch(seqs, [10] * 4)
    policy.train_step(batch, torch.randn(4, generator=g), None, None, LossConfig())


@pytest.fixture()
def policy(tiny_model_dir):
    return Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256)


@pytest.fixture()
def hf_engine(tiny_model_dir):
    return make_engine("hf", str(tiny_model_dir), max_model_len=128)


def _gate() -> FreshnessGate:
    return FreshnessGate(Probe.from_prompts(PROMPTS))


def _run_steps(policy, engine, gate, steps, broken_at, breaker):
    """Train + hand off ``steps`` times; from ``broken_at`` on the engine's loader is ``breaker``."""
    good = engine.load_weights
    for step in range(1, steps + 1):
        _train(policy, step)
        if step == broken_at:
            engine.load_weights = lambda it, *, version, good=good: breaker(
                partial(good, version=version), it
            )
        push_weights(policy, engine, gate=gate, version=step)


# ---- fingerprints, pure ----------------------------------------------------------------------------
def test_fused_engine_params_compare_as_the_sum_of_their_pieces():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 3, generator=g) for _ in range(3))
    sent = fingerprint_tensors(
        [("l.0.attn.q_proj.weight", q), ("l.0.attn.k_proj.weight", k), ("l.0.attn.v_proj.weight", v)]
    )
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    assert engine_name("l.0.attn.k_proj.weight", packed) == "l.0.attn.qkv_proj.weight"
    fused = torch.cat([q, k, v, torch.zeros(2, 3)])  # zero padding (vLLM pads vocab rows) changes nothing
    held = EngineWeights(fingerprint_tensors([("l.0.attn.qkv_proj.weight", fused)]), packed)
    assert compare_fingerprints(sent, held) is None
    k2 = k.clone()
    k2[1, 2] += 1e-4  # one element off by 1e-4 in float32 is caught
    stale = EngineWeights(fingerprint_tensors([("l.0.attn.qkv_proj.weight", torch.cat([q, k2, v]))]), packed)
    msg = compare_fingerprints(sent, stale)
    assert msg is not None and "l.0.attn.qkv_proj.weight (from l.0.attn.q_proj.weight" in msg


def test_tolerance_follows_the_engine_dtype():
    """A bfloat16 engine holds the float32 weights rounded: that passes; a change beyond rounding does not."""
    w = torch.randn(64, 64, generator=torch.Generator().manual_seed(1))
    sent = fingerprint_tensors([("w", w)])
    assert compare_fingerprints(sent, EngineWeights(fingerprint_tensors([("w", w.bfloat16())]))) is None
    assert (
        compare_fingerprints(sent, EngineWeights(fingerprint_tensors([("w", (w * 1.01).bfloat16())])))
        is not None
    )
    # the same float32 rounding is NOT accepted from a float32 engine (there nothing may be lost)
    assert (
        compare_fingerprints(sent, EngineWeights(fingerprint_tensors([("w", w.bfloat16().float())])))
        is not None
    )
    assert "no parameter 'w'" in (compare_fingerprints(sent, EngineWeights({})) or "")


def test_permuted_rows_or_columns_fail_even_in_a_fused_parameter():
    """Sums of values ignore order: swapped embedding rows (outside any probe) or swapped columns would pass
    them. The index-weighted sums see both, also for a fused parameter whose pieces were sent out of order."""
    g = torch.Generator().manual_seed(2)
    emb = torch.randn(50, 8, generator=g)
    sent = fingerprint_tensors([("embed.weight", emb)])
    rows = emb.clone()
    rows[[3, 4]] = rows[[4, 3]]  # two neighbouring rows swapped
    cols = emb.clone()
    cols[:, [0, 7]] = cols[:, [7, 0]]
    padded = torch.cat([emb, torch.zeros(6, 8)])
    assert compare_fingerprints(sent, EngineWeights(fingerprint_tensors([("embed.weight", padded)]))) is None
    for bad in (rows, cols):
        msg = compare_fingerprints(sent, EngineWeights(fingerprint_tensors([("embed.weight", bad)])))
        assert msg is not None and "embed.weight" in msg
    q, k, v = (torch.randn(4, 3, generator=g) for _ in range(3))
    packed = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
    out_of_order = fingerprint_tensors([("a.v_proj.w", v), ("a.q_proj.w", q), ("a.k_proj.w", k)])
    right = EngineWeights(fingerprint_tensors([("a.qkv_proj.w", torch.cat([q, k, v]))]), packed)
    wrong = EngineWeights(fingerprint_tensors([("a.qkv_proj.w", torch.cat([k, q, v]))]), packed)
    assert compare_fingerprints(out_of_order, right) is None
    assert compare_fingerprints(out_of_order, wrong) is not None


def test_an_engine_parameter_the_hand_off_never_sends_fails():
    """A parameter only the engine has (the hand-off's name list missed it) would serve stale values forever."""
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))
    sent = fingerprint_tensors([("a.weight", w)])
    held = EngineWeights(fingerprint_tensors([("a.weight", w), ("b.bias", torch.ones(4))]))
    assert "engine parameter 'b.bias' was not in the hand-off" in (compare_fingerprints(sent, held) or "")


# ---- the gate on the HF engine ---------------------------------------------------------------------
def test_dropped_tensor_fails_on_the_step_it_happens(policy, hf_engine):
    name = "model.layers.1.mlp.down_proj.weight"

    def drop(load, it: Iterable[tuple[str, torch.Tensor]]) -> None:
        load((n, t) for n, t in it if n != name)

    with pytest.raises(WeightSyncError, match=rf"hand-off of step 3: tensor {name}: sent sum="):
        _run_steps(policy, hf_engine, _gate(), 5, 3, drop)


def test_stale_weights_fail_on_the_step_they_happen(policy, hf_engine):
    def stale(load, it: Iterable[tuple[str, torch.Tensor]]) -> None:
        for _ in it:  # consumed, "successful", nothing loaded
            pass

    with pytest.raises(WeightSyncError, match=r"hand-off of step 2: tensor model\.embed_tokens\.weight"):
        _run_steps(policy, hf_engine, _gate(), 4, 2, stale)


def test_renamed_tensor_fails_naming_it(policy, hf_engine):
    """A wrong name mapping that lands on ANOTHER real tensor (no loader error): layer 0's norm goes to layer 1."""
    src, dst = "model.layers.0.input_layernorm.weight", "model.layers.1.input_layernorm.weight"

    def rename(load, it: Iterable[tuple[str, torch.Tensor]]) -> None:
        load(((dst if n == src else n), t) for n, t in it if n != dst)

    with pytest.raises(WeightSyncError, match=rf"step 2: tensor {src}"):
        _run_steps(policy, hf_engine, _gate(), 3, 2, rename)


def test_probe_catches_what_checksums_cannot(policy, hf_engine):
    """Right weights, wrong computation (a norm epsilon the hand-off never touches): the probe gap is named."""
    push_weights(policy, hf_engine, gate=_gate(), version=1)
    for m in hf_engine.model.modules():
        if hasattr(m, "variance_epsilon"):
            m.variance_epsilon = 1.0
    with pytest.raises(WeightSyncError, match=r"step 2: probe gap .* exceeds the tolerance 0\.005"):
        push_weights(policy, hf_engine, gate=_gate(), version=2)


@pytest.mark.slow
def test_correct_handoff_passes_twenty_steps_and_reports_its_cost(policy, hf_engine):
    gate = _gate()
    costs = []
    for step in range(1, 21):
        _train(policy, step)
        m = push_weights(policy, hf_engine, gate=gate, version=step).as_metrics()
        assert m["handoff/probe_gap"] <= m["handoff/probe_tol"] == 5e-3
        costs.append(m["handoff/check_seconds"])
    assert all(c > 0 for c in costs)


def test_fp32_trainer_into_bf16_engine_is_compared_exactly(tiny_model_dir):
    """The sent side is fingerprinted in the engine's dtype, so even a small update (lr 1e-4, about one bf16
    ulp of these weights) that the engine missed is caught, while a correct bf16 hand-off passes."""
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-4, micro_batch_tokens=256)
    engine = make_engine("hf", str(tiny_model_dir), max_model_len=128, dtype="bfloat16")
    gate = FreshnessGate.for_run(engine, PROMPTS, None)
    assert gate.engine_dtype == torch.bfloat16 and gate.tolerance(torch.bfloat16) == 0.1
    for step in (1, 2):
        _train(policy, step)
        assert push_weights(policy, engine, gate=gate, version=step).check is not None
    _train(policy, 3)
    good = engine.load_weights
    engine.load_weights = lambda it, *, version: good(
        ((n, t) for n, t in it if n != "model.layers.1.mlp.gate_proj.weight"), version=version
    )
    with pytest.raises(WeightSyncError, match=r"step 3: tensor model\.layers\.1\.mlp\.gate_proj\.weight"):
        push_weights(policy, engine, gate=gate, version=3)


def test_handoff_in_the_engine_dtype_sends_half_the_bytes_and_passes_the_gate(tiny_model_dir):
    """fp32 weights into a bf16 engine go out as bf16 (cast where they were gathered): half the bytes, the
    engine holds exactly the rounded weights, and the gate passes; a missed tensor still fails it."""
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-4, micro_batch_tokens=256)
    engine = make_engine("hf", str(tiny_model_dir), max_model_len=128, dtype="bfloat16")
    gate = FreshnessGate.for_run(engine, PROMPTS, None)
    full = push_weights(policy, engine, gate=gate, version=1)
    _train(policy, 2)
    half = push_weights(policy, engine, gate=gate, version=2, dtype=torch.bfloat16)
    assert half.check is not None and half.tensors == full.tensors
    assert half.bytes * 2 == full.bytes
    held = dict(engine.model.named_parameters())
    for name, p in policy.lm.named_parameters():
        assert torch.equal(held[name], p.detach().to(torch.bfloat16)), name
    _train(policy, 3)
    good = engine.load_weights
    engine.load_weights = lambda it, *, version: good(
        ((n, t) for n, t in it if n != "model.layers.0.self_attn.q_proj.weight"), version=version
    )
    with pytest.raises(WeightSyncError, match=r"step 3: tensor model\.layers\.0\.self_attn\.q_proj\.weight"):
        push_weights(policy, engine, gate=gate, version=3, dtype=torch.bfloat16)


# ---- the gate on vLLM (fused qkv/gate_up, CPU pre-packed GEMM weights read back through the kernel) ------
@pytest.fixture(params=["reload", "in_place"])
def vllm_load(request, monkeypatch) -> str:
    """How the engine takes new weights: vLLM's CPU backend pre-packs linear weights for oneDNN (layer-wise
    reload); with oneDNN off every weight stays a plain tensor and the hand-off copies into vLLM's own tensors,
    the path every CUDA engine takes (``copies_in_place``)."""
    if request.param == "in_place":
        import vllm._custom_ops as ops

        monkeypatch.setattr(ops, "_supports_onednn", False)
    return str(request.param)


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_renamed_and_dropped_tensors_fail_and_correct_passes(tiny_model_dir, policy, vllm_load):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine("vllm", str(tiny_model_dir), max_model_len=128, kv_cache_memory_bytes=64 << 20)
    assert engine.loads_in_place is (vllm_load == "in_place")
    gate = FreshnessGate.for_run(engine, PROMPTS, None)
    good = engine.load_weights
    for step in (1, 2):
        _train(policy, step)
        assert push_weights(policy, engine, gate=gate, version=step).check is not None
    src, dst = "model.layers.0.self_attn.k_proj.weight", "model.layers.1.self_attn.k_proj.weight"
    _train(policy, 3)
    engine.load_weights = lambda it, *, version: good(
        (((dst if n == src else n), t) for n, t in it if n != dst), version=version
    )
    with pytest.raises(
        WeightSyncError,
        match=r"step 3: tensor model\.layers\.0\.self_attn\.qkv_proj\.weight "
        r"\(from .*k_proj",
    ):
        push_weights(policy, engine, gate=gate, version=3)
    _train(policy, 4)
    engine.load_weights = lambda it, *, version: good(
        ((n, t) for n, t in it if n != "model.norm.weight"), version=version
    )
    with pytest.raises(WeightSyncError, match=r"step 4: tensor model\.norm\.weight"):
        push_weights(policy, engine, gate=gate, version=4)
    engine.load_weights = good
    stats = push_weights(policy, engine, gate=gate, version=5)
    assert stats.check is not None and stats.check.probe_gap < 1e-4 and stats.check.tensors_checked == 16


@pytest.mark.vllm
@pytest.mark.slow
def test_generation_probe_catches_stale_prefix_cache_kv(tiny_model_dir, policy, monkeypatch):
    """Issue 41: prompt log-probs never read the prefix cache, so only the generation probe sees stale KV. With
    a continuous request resident (vLLM then refuses to reset the prefix cache) the engine, which salts every
    request with the weights it holds, passes every hand-off; with a salt that never changes (what streams
    carried before) the second hand-off after it fails: the probe context's blocks of the previous one are hit."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine("vllm", str(tiny_model_dir), max_model_len=256, kv_cache_memory_bytes=64 << 20)
    gate = FreshnessGate.for_run(engine, PROMPTS, None)
    resident = SamplingConfig(temperature=1.0, max_tokens=200, seed=1, ignore_eos=True)
    engine.submit([Request("resident", PROMPTS[0], resident, 1)])
    for step in (1, 2):
        _train(policy, step)
        check = push_weights(policy, engine, gate=gate, version=step).check
        assert check is not None and check.generation_gap < 1e-4
    assert engine.llm.reset_prefix_cache() is False  # the resident request holds blocks: nothing was dropped
    monkeypatch.setattr(type(engine), "cache_salt", property(lambda self: "unsalted"))
    _train(policy, 3)
    push_weights(policy, engine, gate=gate, version=3)  # caches the probe context under the fixed salt
    _train(policy, 4)
    with pytest.raises(
        WeightSyncError, match=r"step 4: generation probe gap .* exceeds the tolerance 0\.005"
    ):
        push_weights(policy, engine, gate=gate, version=4)


@pytest.mark.slow
@pytest.mark.distributed
def test_per_rank_handoff_every_rank_checks_its_engine_and_all_stop_together(tiny_model_dir, tmp_path):
    import json
    import socket
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(here.parents[1])}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(port),
        str(here / "freshness_worker.py"),
        str(tiny_model_dir),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world"] == r1["world"] == 2
    assert r0["step1"]["ok"] and r1["step1"]["ok"] and r0["step1"]["probe_gap"] < 1e-4
    assert not r0["step2"]["ok"] and not r1["step2"]["ok"]  # both stop, neither hangs
    assert "step 2: rank 1: tensor model.layers.1.self_attn.o_proj.weight" in r1["step2"]["error"]
    assert "rank 0: another rank reported a mismatch" in r0["step2"]["error"]


@pytest.mark.parametrize("corrupt", [None, "model.layers.1.mlp.down_proj.weight"])
def test_split_handoff_checks_what_the_trainer_sent_not_what_arrived(policy, hf_engine, corrupt):
    """Split placement: the rollout rank compares what arrived with the trainer's own fingerprints, so a tensor
    changed in transit fails the step (before, it checked its engine against what it had received: a pass)."""
    import threading

    from reasoning_rl.distributed.broadcast import receive_weights, send_weights

    wire = InProcessWire(corrupt)
    _train(policy, 1)
    sender = threading.Thread(
        target=send_weights, args=(policy, wire.end(0)), kwargs={"bucket_bytes": 1 << 16, "gate": _gate()}
    )
    sender.start()
    try:
        if corrupt is None:
            assert receive_weights(hf_engine, wire.end(1), gate=_gate(), version=1).check is not None
        else:
            with pytest.raises(WeightSyncError, match=rf"step 1: what arrived differs .* tensor {corrupt}"):
                receive_weights(hf_engine, wire.end(1), gate=_gate(), version=1)
    finally:
        sender.join(60)
