"""The hf engine as a ``ContinuousEngine`` (issue 43): a group submitted with its place among the groups admitted
with it samples exactly what ``stream`` gives that prompt of a wave (the golden trajectories' rollouts, now
through the frontier), each ``advance`` finishes one group, ``abort`` and ``running`` track the queue, and
eval's ``stream`` beside queued requests neither runs nor loses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from reasoning_rl.rollout import ContinuousEngine, Request, RolloutError, SamplingConfig, make_engine
from reasoning_rl.rollout.hf_engine import HFEngine

PROMPTS = [[5, 9, 12, 7], [8, 8, 30], [41, 17, 22, 9, 3]]
N = 3


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> HFEngine:
    made = make_engine("hf", str(tiny_model_dir), max_model_len=64)
    assert isinstance(made, HFEngine)
    return made


def _sampling(**update: object) -> SamplingConfig:
    return SamplingConfig(n=N, max_tokens=8, temperature=1.0).model_copy(update=update)


def _group(g: int, prompt: list[int], seed: int, tag: str = "r") -> list[Request]:
    """A frontier group: sample j's seed is seed + j, its place g in the admission as ``prompt_offset``."""
    s = _sampling(prompt_offset=g)
    return [Request(f"{tag}{g}-{j}", prompt, s, seed + j, group=g) for j in range(N)]


def test_submitted_groups_sample_what_a_stream_does(engine: HFEngine) -> None:
    assert isinstance(engine, ContinuousEngine)
    wave = engine.generate(PROMPTS, _sampling(seed=1234))
    engine.submit([r for g, p in enumerate(PROMPTS) for r in _group(g, p, 1234)])
    assert engine.running() == len(PROMPTS) * N
    got: dict[str, tuple[list[int], list[float], str]] = {}
    for left in range(len(PROMPTS) - 1, -1, -1):
        deltas = engine.advance()
        assert len(deltas) == N and all(d.finished and d.cached_tokens == 0 for d in deltas)  # one group
        assert engine.running() == left * N
        got.update({d.id: (d.token_ids, d.logprobs, d.finish_reason) for d in deltas})
    assert engine.advance() == []
    for c in wave:
        assert got[f"r{c.prompt_index}-{c.sample_index}"] == (c.token_ids, c.logprobs, c.finish_reason)


def test_abort_and_a_stream_beside_queued_requests(engine: HFEngine) -> None:
    engine.submit(_group(0, PROMPTS[0], 7, "a") + _group(1, PROMPTS[1], 7, "a"))
    engine.abort(["a0-0", "a0-1", "a0-2", "a1-2"])  # all of group 0, one sample of group 1
    assert engine.running() == 2
    before = engine.generate(PROMPTS[:1], _sampling(seed=3))
    assert engine.running() == 2 and engine.generate(PROMPTS[:1], _sampling(seed=3)) == before
    assert sorted(d.id for d in engine.advance()) == ["a1-0", "a1-1"]
    assert engine.running() == 0


def test_resubmitted_partial_sample_and_an_asleep_engine(engine: HFEngine) -> None:
    """A partial sample comes back as its prompt plus its tokens, with what is left of the budget."""
    (first,) = _group(0, PROMPTS[0], 11)[:1]
    engine.submit([first])
    (whole,) = engine.advance()
    part = whole.token_ids[:2]
    rest = Request("p", PROMPTS[0] + part, _sampling(max_tokens=8 - len(part)), 99)
    engine.submit([rest])
    (delta,) = engine.advance()
    assert delta.finished and 1 <= len(delta.token_ids) <= 8 - len(part)
    engine._asleep = True  # what sleep() records on GPU; CPU sleep is a no-op
    try:
        engine.submit([rest])
        with pytest.raises(RolloutError, match="asleep"):
            engine.advance()
    finally:
        engine._asleep = False
        engine.abort(["p"])
