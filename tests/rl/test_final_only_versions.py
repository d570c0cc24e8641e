"""Issue 44: continuous requests that report once, at their end (``Request(deltas=False)``, vLLM's FINAL_ONLY),
record the same tokens, log-probs and per-token policy versions as per-step deltas, across weight swaps in the
middle of the requests; ``partial`` reads an unfinished request's output so far, the same as the deltas so far;
the engine's ``sampled`` counts each token in the step that sampled it (the per-step generation figures), the same
per step as the deltas, though a FINAL_ONLY request reports nothing before its end."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

from reasoning_rl.handoff import push_weights  # noqa: E402
from reasoning_rl.policy import Policy  # noqa: E402
from reasoning_rl.rollout import Delta, Request, SamplingConfig, make_engine  # noqa: E402

PROMPT = [7 + (i * 13) % 80 for i in range(20)]
SAMPLING = SamplingConfig(temperature=1.0, max_tokens=30, ignore_eos=True)
SWAPS = (6, 15)  # engine steps after which new weights arrive (the requests are resident then)
READ_AT = 20  # the engine step after which unfinished requests are read (``partial``)


def _requests(deltas: bool) -> list[Request]:
    short = SAMPLING.model_copy(update={"max_tokens": 4})  # finishes before the first swap
    out = [Request(f"r{i}", PROMPT[i:], SAMPLING, 100 + i, deltas=deltas) for i in range(3)]
    return [*out, Request("short", PROMPT, short, 7, deltas=deltas)]


Record = dict[str, tuple[list[int], list[float], list[int]]]


def _run(
    engine, policy, weights: list[dict[str, torch.Tensor]], deltas: bool
) -> tuple[Record, Record, list[tuple[int, int]]]:
    """Step the workload to its end, loading ``weights[k]`` (version k) at step 0 and after each of ``SWAPS``:
    each request's (tokens, log-probs, versions), what ``partial`` (deltas=False) or the deltas so far
    (deltas=True) held at ``READ_AT``, and each step's (growth of ``engine.sampled``, tokens reported)."""
    got: Record = {}
    read: Record = {}
    per_step: list[tuple[int, int]] = []

    def load(version: int) -> None:
        policy.lm.load_state_dict(weights[version])
        push_weights(policy, engine, version=version)

    def add(d: Delta) -> None:
        tokens, logprobs, versions = got.setdefault(d.id, ([], [], []))
        tokens += d.token_ids
        logprobs += d.logprobs
        versions += d.token_versions()

    load(0)
    engine.submit(_requests(deltas))
    step = 0
    while len(got) < 4 or engine.running():
        before = engine.sampled
        reported = engine.advance()
        for d in reported:
            add(d)
        per_step.append((engine.sampled - before, sum(len(d.token_ids) for d in reported)))
        step += 1
        if step in SWAPS:
            load(SWAPS.index(step) + 1)
        if step == READ_AT:
            ids = ["r0", "r1", "r2"]
            if deltas:
                read = {i: (got[i][0][:], got[i][1][:], got[i][2][:]) for i in ids}
            else:
                read = {d.id: (d.token_ids, d.logprobs, d.token_versions()) for d in engine.partial(ids)}
    return got, read, per_step


@pytest.mark.vllm
@pytest.mark.slow
def test_final_only_records_what_deltas_record_across_swaps(tiny_model_dir):
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine("vllm", str(tiny_model_dir), max_model_len=256, kv_cache_memory_bytes=64 << 20)
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-3, micro_batch_tokens=256)
    base = {k: v.detach().clone() for k, v in policy.lm.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    weights = [base] + [
        {k: v + 0.05 * torch.randn(v.shape, generator=g, dtype=v.dtype) for k, v in base.items()}
        for _ in SWAPS
    ]
    per_step, per_step_read, delta_counts = _run(engine, policy, weights, deltas=True)
    final_only, final_only_read, final_counts = _run(engine, policy, weights, deltas=False)

    assert final_only == per_step  # tokens, log-probs and per-token versions, exactly
    # the log-probs the engine kept itself (not vLLM's per-token objects) are vLLM's, one per token
    assert all(len(lps) == len(t) > 0 for t, lps, _ in final_only.values())
    # each step's count is the tokens that step sampled: what the deltas reported then, not what finished then
    assert [s for s, _ in final_counts] == [s for s, _ in delta_counts] == [r for _, r in delta_counts]
    assert sum(s for s, _ in final_counts) == sum(len(t) for t, _, _ in final_only.values()) == 3 * 30 + 4
    assert all(s > 0 for s, _ in final_counts[:-1])  # r0-r2 sample every step until the last
    assert [r for _, r in final_counts] == [0, 0, 0, 4] + [0] * 25 + [90]  # reported: at their ends
    assert final_only_read == per_step_read and set(final_only_read) == {"r0", "r1", "r2"}
    tokens, _, versions = final_only["r0"]
    assert len(tokens) == 30 and versions == [0] * SWAPS[0] + [1] * (SWAPS[1] - SWAPS[0]) + [2] * (
        30 - SWAPS[1]
    )
    assert final_only["short"][2] == [0] * 4
    assert engine.partial(["r0", "short"]) == []  # finished: nothing left to read
