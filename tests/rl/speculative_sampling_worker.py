"""Sampling at temperature 1 with and without rollout.speculative, each variant's engine built in this one child
process (ngram last: vLLM's ngram drafter imports numba, after which a vLLM engine built in the same process
crashes). One response for each of N distinct prompts per variant; ``group`` first samples every prompt once
(recorded, not measured) so the measured response can draft from an earlier one of its own prompt.

The model is the tiny random one made near-Markov and peaked (attention and MLP outputs damped, the head
scaled) so that at temperature 1 it repeats itself and drafts are accepted, with EOS sharing the logit of the
token greedy decoding emits most, so that responses end at varied lengths. Per variant: lengths, per-prompt
token counts, draft counts, calibration z-scores under the model's own distribution, and the largest
|engine - model| log-prob gap (the model's float32 forward, what the trainer recomputes). Writes one JSON file. ``--no-fix`` skips the CPU kernel correction (to see
the test fail without it)."""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch

from reasoning_rl.config import SpeculativeConfig
from reasoning_rl.rollout import SamplingConfig, make_engine
from reasoning_rl.rollout.exactness import Calibration
from reasoning_rl.tiny import build_tiny_model

VARIANTS = ("off", "group", "ngram")  # ngram last: numba
PROMPTS = 2000
SAMPLING = SamplingConfig(n=1, temperature=1.0, max_tokens=64, logprobs=True)
EOS = 1


def build_peaked_model(out: Path) -> Path:
    from transformers import Qwen2ForCausalLM

    build_tiny_model(out, tie_word_embeddings=False)
    model = Qwen2ForCausalLM.from_pretrained(out)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.1)
            layer.mlp.down_proj.weight.mul_(0.1)
        g = torch.Generator().manual_seed(0)
        counts: collections.Counter[int] = collections.Counter()
        for _ in range(20):
            ids = torch.randint(7, model.config.vocab_size, (1, 12), generator=g)
            greedy = model.generate(
                ids, max_new_tokens=48, do_sample=False, eos_token_id=None, pad_token_id=0
            )
            counts.update(greedy[0, 12:].tolist())
        model.lm_head.weight[EOS] = model.lm_head.weight[counts.most_common(1)[0][0]]
    model.save_pretrained(out, safe_serialization=True)
    return out


def calibrate(model: torch.nn.Module, comps: list, vocab: int) -> tuple[Calibration, np.ndarray, float]:
    """Calibration z-scores of the drawn tokens under the model, each prompt's token counts, and the largest
    gap between the engine's log-probs and the model's recompute (batched, right-padded forwards)."""
    cal = Calibration(EOS)
    counts = np.zeros((len(comps), vocab), dtype=np.int64)
    gap = 0.0
    with torch.no_grad():
        for lo in range(0, len(comps), 100):
            chunk = comps[lo : lo + 100]
            seqs = [c.prompt_ids + c.token_ids for c in chunk]
            width = max(len(q) for q in seqs)
            ids = torch.tensor([q + [0] * (width - len(q)) for q in seqs])
            mask = torch.tensor([[1] * len(q) + [0] * (width - len(q)) for q in seqs])
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            for row, c in enumerate(chunk):
                p = len(c.prompt_ids)
                lsm = logits[row, p - 1 : p - 1 + len(c.token_ids)].log_softmax(-1)
                tokens = torch.tensor(c.token_ids)
                cal.add(lsm, tokens)
                np.add.at(counts[lo + row], c.token_ids, 1)
                recomputed = lsm.gather(-1, tokens[:, None])[:, 0]
                gap = max(gap, float((recomputed - torch.tensor(c.logprobs)).abs().max()))
    return cal, counts, gap


def unfixed() -> None:
    """The engines get the CPU kernels' argument fix (without it no drafter starts) but not the expand fix."""
    import vllm.utils.cpu_triton_utils as cpu_tl

    import reasoning_rl.rollout.vllm_engine as vllm_engine

    patch = vllm_engine.patch_cpu_rejection_sampler

    def argument_only() -> None:
        expand = cpu_tl.expand_kernel.func
        patch()
        cpu_tl.expand_kernel.func = expand

    vllm_engine.patch_cpu_rejection_sampler = argument_only  # type: ignore[assignment]


def main(out_dir: str, out: str, fix: bool) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if not fix:
        unfixed()
    model_dir = build_peaked_model(Path(out_dir) / "peaked")
    from transformers import Qwen2ForCausalLM

    hf = Qwen2ForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    vocab = int(hf.config.vocab_size)
    rng = random.Random(0)
    prompts = [[rng.randrange(7, vocab) for _ in range(rng.randrange(8, 25))] for _ in range(PROMPTS)]
    result: dict[str, object] = {}
    for seed, method in enumerate(VARIANTS, start=11):
        spec = None if method == "off" else SpeculativeConfig(method=method, num_speculative_tokens=4)
        engine = make_engine(
            "vllm",
            str(model_dir),
            max_model_len=256,
            kv_cache_memory_bytes=128 << 20,
            speculative=spec,
            seed=seed,
        )
        if method == "group":
            engine.generate(prompts, SAMPLING)  # recorded: the measured round drafts from it
        t = time.perf_counter()
        comps = engine.generate(prompts, SAMPLING)
        seconds = time.perf_counter() - t
        cal, counts, gap = calibrate(hf, comps, vocab)
        drafts = [c.drafts for c in comps if c.drafts is not None]
        result[method] = {
            "seconds": round(seconds, 2),
            "lengths": [len(c.token_ids) for c in comps],
            "counts": counts.tolist(),
            "tokens": cal.tokens,
            "z_logprob": cal.z_logprob,
            "z_eos": cal.z_eos,
            "proposed": sum(d.draft_tokens for d in drafts),
            "accepted": sum(d.accepted for d in drafts),
            "logprob_gap": gap,
        }
        del engine
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--no-fix" not in sys.argv[3:])
