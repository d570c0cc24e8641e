"""gen tok/s on continuous steps (rollout.max_lag > 0; issue 47: 141,859 tok/s): a continuous step trains groups
that finished, wholly or partly, during earlier steps, so the trained samples' tokens over this step's generation
time is no throughput. The figure counts the tokens the engine produced inside the step's own generation window.

A scripted continuous engine (one token per live request per ``advance``, each request as long as its prompt's
single token id says) runs three steps of the real ``Frontier`` (batch 1, max_lag 1, two groups generating, one
sample a group); the
metric is the trainer's own ``Trainer._timings`` over a trace whose generation span is fixed at 2 s, so nothing
here depends on timing."""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import CountdownEngine, scripted_frontier

from graders.runtime import GradingPool
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.loop import StepTrace, Trainer

LENGTHS = [2, 2, 6]  # prompt k's requests generate LENGTHS[k] tokens


def _gen_tokens_per_s(tmp_path: Path, step: int, flow: dict[str, float]) -> float:
    """The trainer's gen tok/s of ``step`` with its generation span fixed at 2 s."""
    trace = StepTrace(tmp_path / f"timings{step}.jsonl")
    trace.add_span("generate", step, 100.0, 102.0)
    timings = Trainer._timings(trace, step, 0.0, flow)
    trace.close()
    return timings["throughput/gen_tokens_per_s"]


def test_gen_tokens_per_s_counts_the_tokens_generated_inside_a_continuous_step(tmp_path: Path) -> None:
    trace = TraceWriter(tmp_path / "trace.jsonl")
    engine = CountdownEngine()
    with GradingPool(workers=1) as pool:
        frontier = scripted_frontier(engine, pool, [[n] for n in LENGTHS], running_groups=2)
        steps = []
        for step in (1, 2, 3):
            steps.append(frontier.next_batch(step, trace))
            engine.load_weights([], version=step)  # the step's update, handed off
    trace.close()
    # step 1 admits prompts 0 and 1 (two slots, capacity 2), both finish after 2 advances (4 tokens); it trains
    # prompt 0 (the capacity is full: nothing admitted in their slots).
    # step 2 admits prompt 2 and trains prompt 1 at once: finished in step 1, nothing is generated in step 2.
    # step 3 admits prompt 0 again and waits for prompt 2, due now: 6 advances, 6 + 2 tokens; it trains prompt 2.
    generated = [flow["rollout/generated_tokens"] for _, flow in steps]
    trained = [rollouts.tokens for rollouts, _ in steps]
    assert (generated, trained) == ([4.0, 0.0, 8.0], [2, 2, 6])
    got = [_gen_tokens_per_s(tmp_path, step, f) for step, (_, f) in enumerate(steps, start=1)]
    # the step's own tokens over its 2 s; the trained groups' tokens (the old figure) would be 1, 1 and 3 tok/s
    assert got == [pytest.approx(2.0), 0.0, pytest.approx(4.0)]
