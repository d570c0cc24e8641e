"""gen tok/s on continuous steps (rollout.max_lag > 0; issue 47: 141,859 tok/s): a continuous step trains groups
that finished, wholly or partly, during earlier steps, so the trained samples' tokens over this step's generation
time is no throughput. The figure counts the tokens the engine produced inside the step's own generation window.

A scripted continuous engine (one token per live request per ``advance``, each request as long as its prompt's
single token id says) runs three steps of the real ``Frontier`` (batch 1, max_lag 1, two groups generating, one
sample a group); the
metric is the trainer's own ``Trainer._timings`` over a trace whose generation span is fixed at 2 s, so nothing
here depends on timing. Issue 44: with requests that report only at their end (``WholeEngine``, vLLM's
FINAL_ONLY), the step's figure still counts each token in the step that sampled it (the engine's ``sampled``),
not in the step its request finishes."""

from __future__ import annotations

from pathlib import Path

import pytest
from rrl_testutil import CountdownEngine, WholeEngine, scripted_frontier

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


@pytest.mark.parametrize("engine_kind", [CountdownEngine, WholeEngine])
def test_a_request_spanning_steps_counts_its_tokens_in_the_steps_that_sampled_them(
    tmp_path: Path, engine_kind: type[CountdownEngine]
) -> None:
    """Prompt 1's request (6 tokens) samples 2 tokens in step 1 and 4 in step 2, where it finishes. An engine
    that reports it only then (``WholeEngine``) must give the same per-step figures as one that reports every
    token as it is sampled (``CountdownEngine``); counting reported tokens would give [2, 8, 0]."""
    trace = TraceWriter(tmp_path / "trace.jsonl")
    engine = engine_kind()
    with GradingPool(workers=1) as pool:
        frontier = scripted_frontier(engine, pool, [[2], [6], [2]], running_groups=2)
        steps = []
        for step in (1, 2, 3):
            steps.append(frontier.next_batch(step, trace))
            engine.load_weights([], version=step)
    trace.close()
    # step 1: prompts 0 and 1 for 2 advances (prompt 0 done, trained); step 2: prompt 2 admitted in 0's slot,
    # 2 advances beside prompt 1 (prompt 2 done), 2 more for prompt 1 alone (done, trained, due at version 1);
    # step 3 trains prompt 2, finished in step 2: nothing generated.
    generated = [flow["rollout/generated_tokens"] for _, flow in steps]
    trained = [rollouts.tokens for rollouts, _ in steps]
    assert (generated, trained) == ([4.0, 6.0, 0.0], [2, 6, 2])
    assert sum(generated) == engine.sampled == 2 + 6 + 2
    assert [s.completion.versions for s in steps[1][0]] == [[0, 0, 1, 1, 1, 1]]  # sampled across the swap
