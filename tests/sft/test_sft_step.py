"""The supervised step: exactly masked token cross-entropy; packed micro-batches equal right-padded ones
(1e-5); two FSDP2 ranks equal one rank (torchrun, gloo)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from rrl_testutil import two_ranks  # noqa: E402

HERE = Path(__file__).resolve().parent
TOL = 1e-5


def worker() -> Any:
    sys.path.insert(0, str(HERE))
    try:
        import sft_worker
    finally:
        sys.path.remove(str(HERE))
    return sft_worker


def close(a: dict[str, Any], b: dict[str, Any], tol: float) -> None:
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.allclose(a[k], b[k], atol=tol, rtol=0), (k, (a[k] - b[k]).abs().max())


def test_loss_is_masked_token_cross_entropy(tiny_model_dir: Path) -> None:
    """The first step's loss is the mean NLL over the loss mask, computed here from the model's logits, and
    tokens under a hole of the mask (tool output) add nothing."""
    from transformers import AutoModelForCausalLM

    w = worker()
    batch = w.sft_batch()
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    nll, count = 0.0, 0
    with torch.no_grad():
        for i, seq in enumerate(batch.sequences):
            logp = torch.log_softmax(lm(seq[None]).logits[0, :-1].float(), -1)
            p = batch.prompt_lens[i]
            for k, keep in enumerate(batch.response_mask[i, : len(seq) - p].tolist()):
                if keep:
                    nll -= float(logp[p - 1 + k, seq[p + k]])
                    count += 1
    assert count < sum(batch.response_lens)  # the batch does have masked-out response tokens
    out = w.run(str(tiny_model_dir))
    assert out["steps"][0]["loss"] == pytest.approx(nll / count, abs=1e-5)
    assert out["steps"][0]["tokens"] == count


def test_packed_equals_padded(tiny_model_dir: Path) -> None:
    w = worker()
    padded = w.run(str(tiny_model_dir), packing="off")
    packed = w.run(str(tiny_model_dir), packing="on", micro_batch_tokens=64)
    assert packed["steps"][0]["packed"] == 1.0 and padded["steps"][0]["packed"] == 0.0
    for a, b in zip(padded["steps"], packed["steps"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=TOL)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], abs=TOL)
    assert padded["eval"]["nll"] == pytest.approx(packed["eval"]["nll"], abs=TOL)
    assert padded["eval"]["correct"] == packed["eval"]["correct"]
    close(padded["params"], packed["params"], TOL)


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_equal_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    one = worker().run(str(tiny_model_dir))
    out = tmp_path / "two.pt"
    two_ranks(HERE / "sft_worker.py", str(tiny_model_dir), str(out))
    two = torch.load(out, weights_only=False)
    assert two["world"] == 2
    for a, b in zip(one["steps"], two["steps"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=TOL)
        assert a["tokens"] == b["tokens"]
    assert one["before"] == pytest.approx(two["before"], abs=1e-4)
    assert one["eval"] == pytest.approx(two["eval"], abs=1e-4)
    close(one["params"], two["params"], TOL)
