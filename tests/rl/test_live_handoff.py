"""Freshness check 3 (issue 31): a request kept in the engine across a hand-off must sample its next tokens
with the new weights. Real model log-probs: a tiny causal LM at version 0 and the same model after an update
(version 1); one request samples 6 tokens at version 0, the hand-off happens, it samples 6 more either with
version 1 (the hand-off reached the live engine) or still with version 0 (a skipped hand-off)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from torch import Tensor

from reasoning_rl.freshness import PROBE_TOL, WeightSyncError, live_handoff_check

transformers = pytest.importorskip("transformers")


def _logprobs(model: torch.nn.Module, ids: Tensor, start: int) -> Tensor:
    """log p(ids[t] | ids[:t]) for t >= start."""
    with torch.no_grad():
        logits = model(ids[None]).logits[0].float()
    return torch.log_softmax(logits[start - 1 : -1], dim=-1).gather(1, ids[start:, None])[:, 0]


def _sample(model: torch.nn.Module, ids: Tensor, n: int, gen: torch.Generator) -> Tensor:
    for _ in range(n):
        with torch.no_grad():
            probs = torch.softmax(model(ids[None]).logits[0, -1].float(), dim=-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=gen)])
    return ids


def _batch(tiny_model_dir: Path, skipped: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    torch.manual_seed(0)
    old = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    new = copy.deepcopy(old)
    with torch.no_grad():  # the update: every weight moved
        for p in new.parameters():
            p.add_(0.3 * torch.randn_like(p))
    gen = torch.Generator().manual_seed(1)
    prompt = torch.tensor([5, 9, 12, 7])
    before = _sample(old, prompt, 6, gen)
    after = _sample(old if skipped else new, before, 6, gen)
    start = len(prompt)
    behaviour = torch.cat(
        [_logprobs(old, before, start), _logprobs(old if skipped else new, after, len(before))]
    )
    recomputed = _logprobs(new, after, start)  # the trainer at version 1
    versions = torch.tensor([0] * 6 + [1] * 6)
    return recomputed[None], behaviour[None], versions[None], torch.ones(1, 12, dtype=torch.bool)


def test_live_request_continued_with_the_new_weights_passes(tiny_model_dir: Path) -> None:
    rec, beh, ver, mask = _batch(tiny_model_dir, skipped=False)
    out = live_handoff_check(rec, beh, ver, mask, 1, PROBE_TOL[torch.float32], step=2)
    assert out["handoff/live_tokens"] == 4.0 and out["handoff/live_gap"] < 1e-4


def test_skipped_handoff_into_a_live_engine_fails(tiny_model_dir: Path) -> None:
    rec, beh, ver, mask = _batch(tiny_model_dir, skipped=True)
    with pytest.raises(WeightSyncError, match="kept decoding with other weights"):
        live_handoff_check(rec, beh, ver, mask, 1, PROBE_TOL[torch.float32], step=2)


def test_no_request_crossed_the_handoff_checks_nothing() -> None:
    ver = torch.tensor([[1, 1, 1, -1], [0, 0, -1, -1]])  # one new request, one finished before the hand-off
    mask = ver >= 0
    assert live_handoff_check(torch.zeros(2, 4), torch.ones(2, 4), ver, mask, 1, 1e-3, step=2) == {}
