"""FSDP2 data parallelism: a two-process (gloo) step equals a single-process step on the same batch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from rrl_testutil import two_ranks

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def single(tiny_model_dir):
    sys.path.insert(0, str(HERE))
    try:
        from fsdp_worker import run
    finally:
        sys.path.remove(str(HERE))
    return run(str(tiny_model_dir), micro_batch_tokens=10_000)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("packing", ["off", "on"])
def test_two_process_fsdp2_step_matches_single_process(tiny_model_dir, tmp_path, single, packing):
    """Against one padded single-process step; ``packing=on``: each rank packs its shard into rows (the
    loss normalisers are all-reduced token counts, whatever the layout)."""
    out = tmp_path / "dp2.pt"
    # 20-token budget: several micro-batches
    two_ranks(HERE / "fsdp_worker.py", str(tiny_model_dir), str(out), "20", packing)
    dp = torch.load(out, weights_only=False)
    assert dp["world"] == 2 and single["world"] == 1
    assert dp["metrics"]["micro_batches"] > 1  # this rank's shard was split
    assert dp["metrics"]["packed"] == float(packing == "on") and single["metrics"]["packed"] == 0.0
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "grad_norm", "tokens"):
        assert dp["metrics"][key] == pytest.approx(single["metrics"][key], rel=1e-5, abs=1e-6), key
    assert single["metrics"]["clip_frac"] > 0  # the step exercised clipping
    moved = 0.0
    for name, p in single["params"].items():
        q = dp["params"][name]
        # A key-projection bias adds q.b to every logit of a query: softmax is shift-invariant, so its gradient
        # is exactly 0 in theory and reduction-order noise (~1e-9) in practice, which Adam's first step
        # (lr * g / (|g| + 1e-8)) turns into an update of arbitrary size below lr: compare it at lr's scale.
        atol = 1e-3 if name.endswith("k_proj.bias") else 2e-6
        assert torch.allclose(p, q, atol=atol, rtol=1e-5), (name, (p - q).abs().max())
        moved = max(moved, float((p - single["engine_params"][name]).abs().max()))
    assert moved == 0.0  # hand-off: the engine on rank 0 now holds exactly the trained weights
    for name, p in dp["params"].items():
        assert torch.equal(p, dp["engine_params"][name]), name
    assert dp["handoff_tensors"] == len(dp["params"])


def test_single_process_step_moves_weights(tiny_model_dir, single):
    from transformers import AutoModelForCausalLM

    init = {
        n: p.detach()
        for n, p in AutoModelForCausalLM.from_pretrained(
            tiny_model_dir, dtype=torch.float32
        ).named_parameters()
    }
    delta = max(float((single["params"][n] - init[n]).abs().max()) for n in init)
    assert 1e-4 < delta < 1e-2  # one AdamW step at lr 1e-3


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.vllm
def test_two_ranks_each_with_vllm_get_the_sharded_weights(tiny_model_dir):
    pytest.importorskip("vllm")
    import json

    proc = two_ranks(HERE / "vllm_dp_worker.py", str(tiny_model_dir), timeout=240)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["rank"] for r in rows) == [0, 1]
    for r in rows:
        assert r["before"] > 0.05 and r["after"] <= 1e-3, r
        assert r["tensors"] == 26
