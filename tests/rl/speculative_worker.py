"""rollout.speculative in vLLM, each variant's engine built in this one child process (vLLM's ngram drafter
imports numba, after which a vLLM engine built in the same process crashes: the ngram engine comes last, and
the test process itself never builds one). Per variant (off, group, ngram): the trained policy's weights are
handed off through the freshness gate, then two greedy rounds of the same prompts (round 2 can draft from
round 1: group's earlier epoch), each completion's tokens, engine log-probs, draft counts and the largest
|engine - trainer| log-prob gap; then the same requests through ``submit`` / ``advance`` (how the trainer's
synchronous step drives vLLM). Writes one JSON file."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from reasoning_rl.algorithms import LossConfig
from reasoning_rl.config import SpeculativeConfig
from reasoning_rl.freshness import FreshnessGate
from reasoning_rl.handoff import push_weights
from reasoning_rl.policy import Policy, TokenBatch, build_batch, load_tokenizer
from reasoning_rl.rollout import Request, SamplingConfig, make_engine

VARIANTS = ("off", "group", "ngram")  # ngram last: numba
GREEDY = SamplingConfig(n=2, temperature=0.0, max_tokens=48)


def main(model_dir: str, out: str) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    tok = load_tokenizer(model_dir, require_chat_template=True)
    msgs = [[{"role": "user", "content": c}] for c in ("2+2?", "hello there", "abc xyz abc")]
    prompts = [list(tok.apply_chat_template(m, add_generation_prompt=True)["input_ids"]) for m in msgs]
    policy = Policy.from_pretrained(model_dir, lr=1e-2, micro_batch_tokens=512)
    g = torch.Generator().manual_seed(0)
    batch = TokenBatch([torch.randint(7, 90, (20,), generator=g) for _ in range(4)], [10] * 4)
    policy.train_step(batch, torch.randn(4, generator=g), None, None, LossConfig())  # weights != checkpoint
    result: dict[str, object] = {}
    for method in VARIANTS:
        spec = SpeculativeConfig(method=method, num_speculative_tokens=4, lookup_min=2, lookup_max=4)
        engine = make_engine(
            "vllm", model_dir, max_model_len=256, kv_cache_memory_bytes=64 << 20, speculative=spec
        )
        stats = push_weights(policy, engine, gate=FreshnessGate.for_run(engine, prompts, None), version=1)
        rounds = []
        for _ in range(2):
            t = time.perf_counter()
            comps = engine.generate(prompts, GREEDY)
            seconds = time.perf_counter() - t
            trainer, _ = policy.logprobs(build_batch(comps))
            gap = max(
                abs(x - float(trainer[i, k])) for i, c in enumerate(comps) for k, x in enumerate(c.logprobs)
            )
            rounds.append(
                {
                    "tokens": [c.token_ids for c in comps],
                    "drafts": [None if c.drafts is None else vars(c.drafts) for c in comps],
                    "logprob_gap": gap,
                    "seconds": seconds,
                }
            )
        # the trainer's synchronous step drives the engine request by request (``submit`` / ``advance``)
        requests = [
            Request(f"c{i}-{j}", p, GREEDY.model_copy(update={"n": 1}), None, deltas=False)
            for i, p in enumerate(prompts)
            for j in range(GREEDY.n)
        ]
        engine.submit(requests)
        done: dict[str, object] = {}
        while len(done) < len(requests):
            done.update({d.id: d for d in engine.advance() if d.finished})
        kept = engine.drafts.samples(prompts[0]) if engine.drafts is not None else None
        gate = stats.check
        result[method] = {
            "rounds": rounds,
            "gate_probe_gap": None if gate is None else gate.probe_gap,
            "continuous": {
                "tokens": [done[r.id].token_ids for r in requests],
                "drafts": [None if done[r.id].drafts is None else vars(done[r.id].drafts) for r in requests],
            },
            "group_samples_kept": kept,
        }
        del engine
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
