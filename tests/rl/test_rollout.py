"""Rollout engines (vLLM CPU + transformers fallback) and the weight hand-off into vLLM."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.handoff import push_weights  # noqa: E402
from reasoning_rl.policy import ModelLoadError, Policy, TokenBatch, build_batch, load_tokenizer  # noqa: E402
from reasoning_rl.rollout import Request, RolloutError, SamplingConfig, make_engine  # noqa: E402

GREEDY = SamplingConfig(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer(str(tiny_model_dir), require_chat_template=True)


@pytest.fixture(scope="module")
def prompts(tok):
    msgs = [[{"role": "user", "content": c}] for c in ("2+2?", "hello", "abc xyz")]
    return [list(tok.apply_chat_template(m, add_generation_prompt=True)["input_ids"]) for m in msgs]


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir):
    pytest.importorskip("vllm")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return make_engine("vllm", str(tiny_model_dir), max_model_len=256, kv_cache_memory_bytes=64 << 20)


@pytest.fixture
def handoff_engine(vllm_engine, tiny_model_dir):
    """The module's vLLM engine for a test that hands other weights into it: the checkpoint's weights go back
    afterwards, so the tests that compare it with the checkpoint pass in any order (``-p random``, a subset)."""
    yield vllm_engine
    push_weights(Policy.from_pretrained(str(tiny_model_dir)), vllm_engine, version=0)


@pytest.fixture
def handoff_hf_engine(hf_engine, tiny_model_dir):
    """``handoff_engine`` for the transformers engine."""
    yield hf_engine
    push_weights(Policy.from_pretrained(str(tiny_model_dir)), hf_engine, version=0)


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    return make_engine("hf", str(tiny_model_dir), max_model_len=256)


def _fixed_sequences(n: int = 6) -> TokenBatch:
    g = torch.Generator().manual_seed(7)
    seqs = [torch.randint(7, 90, (4 + i + 6,), generator=g) for i in range(n)]
    return TokenBatch(seqs, [4 + i for i in range(n)])


def _max_diff(a: list[list[float]], b: torch.Tensor) -> float:
    return max(abs(x - float(b[i, k])) for i, row in enumerate(a) for k, x in enumerate(row))


# ---- engines ---------------------------------------------------------------------------------------
@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_without_logprobs_same_tokens_and_text(vllm_engine, prompts, tok):
    """``logprobs=False`` (on-policy GRPO skips them): same greedy tokens and text, no log-probs."""
    with_lp = vllm_engine.generate(prompts, GREEDY)
    without = vllm_engine.generate(prompts, SamplingConfig(temperature=0.0, max_tokens=12, logprobs=False))
    assert [c.token_ids for c in without] == [c.token_ids for c in with_lp]
    assert [c.text for c in without] == [c.text for c in with_lp]
    assert all(c.logprobs == [] for c in without) and all(
        len(c.logprobs) == len(c.token_ids) for c in with_lp
    )


@pytest.mark.vllm
@pytest.mark.slow
def test_hf_fallback_greedy_matches_vllm(vllm_engine, hf_engine, prompts, tok):
    v = vllm_engine.generate(prompts, GREEDY)
    h = hf_engine.generate(prompts, GREEDY)
    assert [c.text for c in h] == [c.text for c in v]
    assert [c.token_ids for c in h] == [c.token_ids for c in v]
    assert all(c.text == tok.decode(c.token_ids, skip_special_tokens=True) for c in v)
    gap = max(
        abs(a - b) for x, y in zip(h, v, strict=True) for a, b in zip(x.logprobs, y.logprobs, strict=True)
    )
    assert gap < 1e-4


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_sampling_contract(vllm_engine, prompts):
    cfg = SamplingConfig(n=3, temperature=1.0, top_p=0.9, max_tokens=6, seed=11)
    out = vllm_engine.generate(prompts, cfg)
    assert [(c.prompt_index, c.sample_index) for c in out] == [(i, j) for i in range(3) for j in range(3)]
    for c in out:
        assert c.prompt_ids == prompts[c.prompt_index]
        assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
        assert all(lp <= 0 for lp in c.logprobs)
        assert c.finish_reason in ("stop", "length")
    assert len({tuple(c.token_ids) for c in out if c.prompt_index == 0}) > 1  # samples differ
    again = vllm_engine.generate(prompts, cfg)
    assert [c.token_ids for c in again] == [c.token_ids for c in out]  # seeded: reproducible
    streamed = list(vllm_engine.stream(prompts, cfg))
    assert sorted((c.prompt_index, c.sample_index) for c in streamed) == [
        (c.prompt_index, c.sample_index) for c in out
    ]


@pytest.mark.vllm
@pytest.mark.slow
def test_seeded_sampling_survives_prompts_beyond_one_step_budget(vllm_engine, prompts):
    """24 prompts of 220 tokens (> vLLM's 4096-token step budget) with per-sample seeds: a prompt split over
    two steps used to crash the CPU engine ("CPU Generator does not use offset")."""
    g = torch.Generator().manual_seed(0)
    long_prompts = [prompts[0] + torch.randint(7, 90, (220,), generator=g).tolist() for _ in range(24)]
    cfg = SamplingConfig(n=2, temperature=1.0, max_tokens=4, seed=5)
    out = vllm_engine.generate(long_prompts, cfg)
    assert [(c.prompt_index, c.sample_index) for c in out] == [(i, j) for i in range(24) for j in range(2)]
    assert all(1 <= len(c.token_ids) <= 4 for c in out)
    assert [c.token_ids for c in vllm_engine.generate(long_prompts, cfg)] == [c.token_ids for c in out]


@pytest.mark.vllm
@pytest.mark.slow
def test_cpu_engine_takes_a_context_longer_than_one_step_budget(tiny_model_dir, tmp_path):
    """Chunked prefill is off on CPU, so one step must hold the longest prompt: a 4500-token prompt with
    max_model_len 6000 (> vLLM's 4096-token default step budget) still runs. (Its own process: a second vLLM
    engine here would tear down the module engine's parallel state.)"""
    import json
    import subprocess
    import sys

    model = tmp_path / "long"
    shutil.copytree(tiny_model_dir, model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 8192}))
    script = (
        "import torch\n"
        "from reasoning_rl.rollout import SamplingConfig, make_engine\n"
        f"engine = make_engine('vllm', {str(model)!r}, max_model_len=6000, kv_cache_memory_bytes=64 << 20)\n"
        "prompt = torch.randint(7, 90, (4500,), generator=torch.Generator().manual_seed(1)).tolist()\n"
        "out = engine.generate([prompt], SamplingConfig(n=2, temperature=1.0, max_tokens=3, seed=2))\n"
        "print('LENGTHS', [len(c.token_ids) for c in out])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lengths = json.loads(proc.stdout.split("LENGTHS", 1)[1].strip().splitlines()[0])
    assert len(lengths) == 2 and all(1 <= n <= 3 for n in lengths)


@pytest.mark.vllm
@pytest.mark.slow
def test_stop_strings_and_length(vllm_engine, hf_engine, prompts):
    free = SamplingConfig(temperature=1.0, max_tokens=12, seed=5)
    for engine in (vllm_engine, hf_engine):
        first = engine.generate(prompts[:1], free)[0]
        assert first.finish_reason == "length" and len(first.token_ids) == free.max_tokens
        k = next(k for k in range(2, len(first.text)) if first.text[k] not in first.text[:k])
        stop = first.text[k]
        c = engine.generate(
            prompts[:1], SamplingConfig(temperature=1.0, max_tokens=12, seed=5, stop=(stop,))
        )[0]
        assert (c.finish_reason, c.text) == ("stop", first.text[:k])
        assert c.token_ids == first.token_ids[: len(c.token_ids)] and len(c.token_ids) < len(first.token_ids)


@pytest.mark.vllm
def test_sleep_wake_are_noops_on_cpu(vllm_engine, prompts):
    vllm_engine.sleep()
    assert not vllm_engine.asleep  # no sleep mode on CPU: the engine (the one owner of the state) stays awake
    vllm_engine.wake()
    assert vllm_engine.generate(prompts[:1], GREEDY)[0].token_ids


# ---- hand-off --------------------------------------------------------------------------------------
@pytest.mark.vllm
def test_ignore_eos_generates_exactly_max_tokens_in_both_engines(vllm_engine, hf_engine, prompts):
    # The tiny random model emits EOS early on some samples; ignore_eos must keep going to max_tokens. (n=8: with
    # n=2 vLLM 0.24's samples of seed 3 all ran to 40 tokens; its sample 5 stops at 24.)
    normal = SamplingConfig(n=8, temperature=1.0, max_tokens=40, seed=3)
    fixed = SamplingConfig(n=2, temperature=1.0, max_tokens=40, seed=3, ignore_eos=True)
    for engine in (vllm_engine, hf_engine):
        lengths = [len(c.token_ids) for c in engine.generate(prompts, fixed)]
        assert lengths == [40] * len(lengths), (engine, lengths)
        assert all(c.finish_reason == "length" for c in engine.generate(prompts, fixed))
    assert any(len(c.token_ids) < 40 for c in vllm_engine.generate(prompts, normal)), (
        "test needs an early EOS"
    )


@pytest.mark.vllm
@pytest.mark.slow
def test_handoff_makes_vllm_match_trainer(tiny_model_dir, handoff_engine, handoff_hf_engine, prompts):
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=3e-2, micro_batch_tokens=64)
    fixed = _fixed_sequences()
    seqs, plens = [s.tolist() for s in fixed.sequences], fixed.prompt_lens
    before, _ = policy.logprobs(fixed)
    assert _max_diff(handoff_engine.score(seqs, plens), before) < 1e-3  # same initial weights

    comps = handoff_engine.generate(prompts, SamplingConfig(n=4, max_tokens=10, seed=3))
    batch = build_batch(comps)
    adv = compute_advantages("grpo", torch.rand(len(comps)), torch.tensor([c.prompt_index for c in comps]))
    for _ in range(3):
        assert batch.rollout_logprobs is not None
        policy.train_step(batch, adv, batch.rollout_logprobs, None, LossConfig())
    trained, _ = policy.logprobs(fixed)

    gap_before = _max_diff(handoff_engine.score(seqs, plens), trained)
    assert gap_before > 0.05, "training did not move the weights enough for this test to be meaningful"

    stats = push_weights(policy, handoff_engine, version=1, bucket_bytes=32 << 10)
    assert stats.tensors == len(list(policy.lm.parameters())) and stats.bytes > 0 and stats.seconds > 0
    gap_after = _max_diff(handoff_engine.score(seqs, plens), trained)
    assert gap_after <= 1e-3, f"vLLM vs trainer log-prob gap after hand-off: {gap_after}"

    gen = handoff_engine.generate(prompts, GREEDY)  # sampled-token log-probs agree as well
    lp, _ = policy.logprobs(build_batch(gen))
    assert _max_diff([c.logprobs for c in gen], lp) <= 1e-3

    push_weights(policy, handoff_hf_engine, version=1)
    hf = handoff_hf_engine.generate(prompts, GREEDY)
    ref = [
        policy.lm.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False)[0, len(p) :].tolist()
        for p in prompts
    ]
    assert [c.token_ids for c in gen] == [c.token_ids for c in hf] == ref


def _drain(engine, until: set[str]) -> dict[str, dict]:
    """Advance a continuous engine until the requests ``until`` finished: every request's tokens (and the
    version the engine stamped on each) and cache hits."""
    out: dict[str, dict] = {}
    while until - {k for k, v in out.items() if v["finished"]}:
        for d in engine.advance():
            r = out.setdefault(
                d.id,
                {"tokens": [], "logprobs": [], "versions": [], "cached": d.cached_tokens, "finished": False},
            )
            r["tokens"] += d.token_ids
            r["logprobs"] += d.logprobs
            r["versions"] += [d.version] * len(d.token_ids)
            r["finished"] = d.finished
    return out


@pytest.mark.vllm
@pytest.mark.slow
def test_continuous_requests_cross_a_handoff_and_never_reuse_older_cache(
    tiny_model_dir, handoff_engine, prompts
):
    """Issue 31: a resident request keeps generating across a weight hand-off (and beside a stream); a request
    admitted after it finds none of the blocks computed with the old weights although vLLM refused to drop them
    (the poison is there: the engine's salt keeps it apart), and its tokens come from the new weights."""
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=3e-2, micro_batch_tokens=256)
    push_weights(policy, handoff_engine, version=0)  # version 0 = the policy's weights
    long = [7 + (i * 13) % 80 for i in range(200)]  # past one 128-token CPU block: its first block is cached
    # ignore_eos: c-live must still be resident at the hand-off (at most 23 steps before it). Run after this
    # module's other tests, vLLM 0.24's sample of seed 11 drew EOS at its 6th token, and c-live was gone.
    s = SamplingConfig(temperature=1.0, max_tokens=30, seed=11, ignore_eos=True)
    one = s.model_copy(update={"max_tokens": 1})
    handoff_engine.submit([Request("c-old", long, one, 1), Request("c-live", long, s, 2)])
    first = _drain(handoff_engine, {"c-old"})
    assert not first["c-live"]["finished"]
    assert handoff_engine.generate(prompts[:1], GREEDY)[0].token_ids  # a stream beside the resident request

    comps = handoff_engine.generate(prompts, SamplingConfig(n=4, max_tokens=10, seed=3))
    batch = build_batch(comps)
    adv = compute_advantages("grpo", torch.rand(len(comps)), torch.tensor([c.prompt_index for c in comps]))
    for _ in range(3):
        policy.train_step(batch, adv, batch.rollout_logprobs, None, LossConfig())
    push_weights(policy, handoff_engine, version=1)  # version 1, with c-live resident
    assert handoff_engine.llm.reset_prefix_cache() is False  # vLLM keeps the old blocks while c-live runs

    handoff_engine.submit([Request("c-new", long, one, 3)])
    rest = _drain(handoff_engine, {"c-live", "c-new"})
    assert len(first["c-live"]["tokens"]) + len(rest["c-live"]["tokens"]) == 30  # continued, never restarted
    assert rest["c-new"]["cached"] == 0  # the engine's new salt: no block of the old weights
    # each token carries the version of the step that made it: c-live's tokens the streams stepped before the
    # hand-off (held for advance) are version 0, those after it version 1
    assert set(first["c-live"]["versions"]) == {0} and rest["c-new"]["versions"] == [1]
    assert rest["c-live"]["versions"] == sorted(rest["c-live"]["versions"])
    assert set(rest["c-live"]["versions"]) == {0, 1}
    new_lp, _ = policy.logprobs(build_batch_from(long, rest["c-new"]["tokens"]))
    assert abs(rest["c-new"]["logprobs"][0] - float(new_lp[0, 0])) < 1e-3  # sampled from the new weights


@pytest.mark.vllm
@pytest.mark.slow
def test_a_stream_after_a_handoff_beside_resident_requests_computes_with_the_new_weights(
    tiny_model_dir, handoff_engine, prompts, caplog
):
    """Issue 41: with a continuous request resident vLLM refuses the hand-off's prefix-cache reset, and an eval
    stream whose prompt's first block was cached under the old weights must not reuse it: its log-probs equal
    the trainer's recompute (an unsalted stream read the stale block: 0.13 nats off)."""
    policy = Policy.from_pretrained(str(tiny_model_dir), lr=3e-2, micro_batch_tokens=256)
    push_weights(policy, handoff_engine, version=0)
    long = [9 + (i * 7) % 80 for i in range(200)]  # past one 128-token CPU block
    resident = SamplingConfig(temperature=1.0, max_tokens=200, seed=5, ignore_eos=True)
    handoff_engine.submit([Request("r-live", prompts[0], resident, 5)])
    before = handoff_engine.generate([long], GREEDY)[0]  # caches the first block of ``long`` (old weights)
    comps = handoff_engine.generate(prompts, SamplingConfig(n=4, max_tokens=10, seed=3))
    batch = build_batch(comps)
    adv = compute_advantages("grpo", torch.rand(len(comps)), torch.tensor([c.prompt_index for c in comps]))
    for _ in range(3):
        policy.train_step(batch, adv, batch.rollout_logprobs, None, LossConfig())
    with caplog.at_level(logging.INFO, logger="reasoning_rl.rollout.vllm_engine"):
        push_weights(policy, handoff_engine, version=1)
    assert "vLLM refused to reset the prefix cache" in caplog.text  # acted on (salted apart), not ignored
    assert handoff_engine.llm.reset_prefix_cache() is False  # r-live holds blocks: the old ones stay
    after = handoff_engine.generate([long], GREEDY)[0]
    old_lp = _max_diff([before.logprobs], policy.logprobs(build_batch_from(long, before.token_ids))[0])
    assert old_lp > 0.05, "training did not move the weights enough for this test to be meaningful"
    new_lp, _ = policy.logprobs(build_batch_from(long, after.token_ids))
    assert _max_diff([after.logprobs], new_lp) <= 1e-3
    handoff_engine.abort(["r-live"])


def build_batch_from(prompt: list[int], tokens: list[int]) -> TokenBatch:
    return TokenBatch([torch.tensor(prompt + tokens)], [len(prompt)])


# ---- bad input -------------------------------------------------------------------------------------
def test_nonexistent_model_path_is_a_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ModelLoadError, match="does not exist"):
        Policy.from_pretrained(missing)
    with pytest.raises(RolloutError, match="not a directory"):
        make_engine("hf", missing)
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang'"):
        make_engine("sglang", missing)  # type: ignore[arg-type]
    with pytest.raises(ModelLoadError, match="gguf_file 'x.gguf' not found"):
        load_tokenizer(str(tmp_path), gguf_file="x.gguf")


def test_tokenizer_without_chat_template_is_a_clear_error(tiny_model_dir, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(tiny_model_dir, plain)
    tok = load_tokenizer(str(plain))
    tok.chat_template = None
    tok.save_pretrained(plain)
    for f in plain.glob("chat_template.*"):
        f.unlink()
    assert load_tokenizer(str(plain)) is not None  # fine when no template is needed
    with pytest.raises(ModelLoadError, match="has no chat template"):
        load_tokenizer(str(plain), require_chat_template=True)


def test_bad_sampling_and_prompts(hf_engine):
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        SamplingConfig(n=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(RolloutError, match="prompt 1 is empty"):
        hf_engine.generate([[5, 6], []], GREEDY)
    with pytest.raises(RolloutError, match="max_model_len=256"):
        hf_engine.generate([[5] * 300], GREEDY)


@pytest.mark.vllm
@pytest.mark.slow
def test_handoff_untied_head(tmp_path):
    """With a separate lm_head.weight the name reaches vLLM's loader too (tied case: the test above)."""
    pytest.importorskip("vllm")
    from reasoning_rl.tiny import build_tiny_model

    model_dir = str(build_tiny_model(tmp_path / "untied", tie_word_embeddings=False, seed=1))
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine("vllm", model_dir, max_model_len=128, kv_cache_memory_bytes=64 << 20)
    policy = Policy.from_pretrained(model_dir)
    assert "lm_head.weight" in dict(policy.lm.named_parameters())
    with torch.no_grad():
        policy.lm.lm_head.weight.mul_(3.0)  # change only the head
    fixed = _fixed_sequences(3)
    seqs, plens = [s.tolist() for s in fixed.sequences], fixed.prompt_lens
    want, _ = policy.logprobs(fixed)
    assert _max_diff(engine.score(seqs, plens), want) > 0.05
    push_weights(policy, engine, version=1)
    assert _max_diff(engine.score(seqs, plens), want) <= 1e-3
