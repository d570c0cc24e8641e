"""The memory plan against the measured peak: a random-init model of a real shape trained through our own
path (``factory.build_models`` -> ``Policy``, the plan's micro-batch budget and switches), two GRPO update
steps (so AdamW's state exists), then predicted vs ``torch.cuda.max_memory_allocated`` peak, tokens/s and MFU.

    python bench/gpu/memory_plan_check.py --variant 1.5b     # Qwen2.5-1.5B shape, 512 + 8,192-token sequences
    python bench/gpu/memory_plan_check.py --variant 7b       # Qwen2.5-7B shape, 512 + 4,096, the switches it needs
    python bench/gpu/memory_plan_check.py --tiny             # CPU smoke run of the same code (tiny shape)

No vLLM and no network needed (the engine's part of the plan is not exercised). Writes
``$OUT/memory_plan_<variant>.json`` (or ``--out DIR``). The acceptance of issue 36: measured within 15 % of the
prediction.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from reasoning_rl.algorithms import LossConfig, compute_advantages
from reasoning_rl.config import Config
from reasoning_rl.factory import build_models, device_capacity, run_dtype
from reasoning_rl.memory_plan.advice import fitting_switches
from reasoning_rl.memory_plan.plan import plan_run, usable_bytes
from reasoning_rl.memory_plan.shapes import GiB, ModelShape
from reasoning_rl.memory_plan.update import TrainSetup, update_peak, update_terms
from reasoning_rl.model_shapes import QWEN25_1_5B, QWEN25_7B, TINY
from reasoning_rl.policy import TokenBatch

PEAK_FLOPS = 790e12  # bf16 dense, measured on this H200 kind (bench/RESULTS.md)
PROMPT = 512
VARIANTS: dict[str, dict[str, Any]] = {
    "1.5b": dict(shape=dict(QWEN25_1_5B), response=8192),
    "7b": dict(shape=dict(QWEN25_7B), response=4096),
    "tiny": dict(shape=dict(TINY), response=64, prompt=32),
}


def build_model(
    shape: dict[str, Any], out: Path, seed: int = 0, fill: str = "cpu", arch: str = "qwen2"
) -> Path:
    """A random-init Qwen2 (or a Llama: ``arch``) of ``shape`` saved in bf16 (init on the meta device, then
    filled from a generator on ``fill``, "cuda" where there is one: seconds, not minutes, for 7B). Token ids as
    ``shapes.write_tokenizer``'s."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if (out / "config.json").is_file():
        return out
    config_cls, model_cls = {
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
        "llama": (LlamaConfig, LlamaForCausalLM),
    }[arch]
    config = config_cls(max_position_embeddings=32768, bos_token_id=2, eos_token_id=1, **shape)
    with torch.device("meta"):
        model = model_cls(config).to(torch.bfloat16)
    model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gives each module its own tensor: tie the head to the embeddings again
    g = torch.Generator(fill).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=g, device=fill, dtype=p.dtype) * 0.02)
    model.save_pretrained(out, safe_serialization=True)
    return out


def run_config(model_dir: Path, response: int, prompt: int, device: str, overrides: dict[str, Any]) -> Config:
    raw: dict[str, Any] = {
        "model": {"path": str(model_dir), **overrides.get("model", {})},
        "data": {"train": "unused.jsonl", "max_prompt_tokens": prompt},
        "rollout": {"max_tokens": response, "n": 8},
        "run": {"device": device},
        "algorithm": overrides.get("algorithm", {}),
    }
    return Config.model_validate(raw)


def as_overrides(names: list[str]) -> dict[str, Any]:
    """``model.cpu_offload=true`` ... as nested sections."""
    out: dict[str, Any] = {}
    for name in names:
        key, value = name.split("=")
        section, field = key.split(".")
        out.setdefault(section, {})[field] = json.loads(value)
    return out


def train_flops(shape: ModelShape, tokens: int, seq: int) -> float:
    """fwd+bwd model FLOPs: 6·N·tokens + causal attention (6·layers·hidden·seq·tokens); recompute not counted."""
    return 6.0 * shape.params * tokens + 6.0 * shape.layers * shape.hidden * seq * tokens


def check(variant: str, out_dir: Path, work: Path) -> dict[str, Any]:
    spec = VARIANTS[variant]
    device = "cpu" if variant == "tiny" else "cuda"
    prompt, response = spec.get("prompt", PROMPT), spec["response"]
    seq = prompt + response
    model_dir = build_model(spec["shape"], work / f"model_{variant}")
    shape = ModelShape.from_model_dir(model_dir)
    capacity = device_capacity(device)
    overrides: dict[str, Any] = {"algorithm": {"micro_batch_tokens": 4 * seq}} if device == "cpu" else {}
    cfg = run_config(model_dir, response, prompt, device, overrides)
    dtype = run_dtype(cfg, device)
    switches: list[str] = []
    setup = TrainSetup.of(cfg, device=device, dtype=dtype, world=1)
    usable = usable_bytes(capacity)
    if device == "cuda" and update_peak(shape, setup, seq) > usable:  # the switches the plan names
        found = fitting_switches(shape, setup, usable, seq)
        if found is not None:
            switches = found[0]
            cfg = run_config(model_dir, response, prompt, device, as_overrides(switches))
    plan = plan_run(
        cfg, shape, device=device, dtype=dtype, capacity=capacity, world=1, max_model_len=seq, engine=False
    )
    print(f"[{variant}] switches: {' '.join(switches) or 'none'}", flush=True)
    for line in plan.lines():
        print(f"[{variant}] plan: {line}", flush=True)
    if plan.problem is not None:
        print(f"[{variant}] {plan.problem}", flush=True)
    result: dict[str, Any] = {
        "variant": variant,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "shape": spec["shape"],
        "params": shape.params,
        "sequence_tokens": seq,
        "switches": switches,
        "capacity_gib": round(capacity / GiB, 1),
        "plan": plan.lines(),
        "planned_micro_batch_tokens": plan.micro_batch_tokens,
    }
    per_mb = max(plan.micro_batch_tokens // seq, 1)
    try:
        result.update(measure(cfg, model_dir, shape, device, dtype, seq, prompt, per_mb))
    except torch.cuda.OutOfMemoryError as exc:  # the plan was wrong: say so, then one sequence less
        result["oom_at_sequences_per_micro_batch"] = per_mb
        result["oom"] = str(exc).splitlines()[0]
    if "oom" in result and per_mb > 1:  # outside the handler: its traceback no longer holds the model
        gc.collect()
        torch.cuda.empty_cache()
        result.update(measure(cfg, model_dir, shape, device, dtype, seq, prompt, per_mb - 1))
    print(f"[{variant}] " + json.dumps(result), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"memory_plan_{variant}.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def measure(
    cfg: Config,
    model_dir: Path,
    shape: ModelShape,
    device: str,
    dtype: str,
    seq: int,
    prompt: int,
    per_mb: int,
) -> dict[str, Any]:
    """Two update steps of two micro-batches of ``per_mb`` sequences each; the plan's peak for that block
    (``update_terms`` at per_mb x seq tokens) next to the allocator's."""
    gpu = device == "cuda"
    if gpu:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    policy = build_models(cfg, model_dir, device, dtype, seq).policy
    policy.batching.token_budget = per_mb * seq  # read at every pass
    load_s = time.perf_counter() - t0
    rows = 2 * per_mb
    g = torch.Generator().manual_seed(1)
    batch = TokenBatch(
        [torch.randint(3, shape.vocab, (seq,), generator=g) for _ in range(rows)], [prompt] * rows
    )
    adv = compute_advantages("grpo", torch.rand(rows, generator=g), torch.arange(rows) // 8)
    times, metrics = [], {}
    for _ in range(2):  # step 1 creates AdamW's state (and compiles); step 2 is the steady state
        start = time.perf_counter()
        metrics = policy.train_step(batch, adv, None, None, LossConfig())
        if gpu:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    measured = int(torch.cuda.max_memory_allocated()) if gpu else None
    terms = update_terms(shape, TrainSetup.of(cfg, device=device, dtype=dtype, world=1), per_mb * seq)
    predicted = sum(terms.values())
    tokens = rows * seq
    del policy
    gc.collect()
    if gpu:
        torch.cuda.empty_cache()
    return {
        "micro_batch_tokens": per_mb * seq,
        "sequences_per_micro_batch": per_mb,
        "micro_batches_per_step": int(metrics.get("micro_batches", 0)),
        "predicted_peak_gib": round(predicted / GiB, 2),
        "predicted_terms_gib": {k: round(v / GiB, 2) for k, v in terms.items()},
        "measured_peak_gib": None if measured is None else round(measured / GiB, 2),
        "measured_over_predicted": None if measured is None else round(measured / predicted, 3),
        "load_s": round(load_s, 1),
        "step_s": [round(t, 2) for t in times],
        "tokens_per_s": round(tokens / times[-1]),
        "mfu": round(train_flops(shape, tokens, seq) / times[-1] / PEAK_FLOPS, 3) if gpu else None,
        "loss": metrics.get("loss"),
        "grad_norm": metrics.get("grad_norm"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", choices=["1.5b", "7b"], default="1.5b")
    ap.add_argument("--tiny", action="store_true", help="the tiny shape on CPU (a smoke run of this script)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."), help="where the JSON goes (default $OUT)")
    ap.add_argument("--work", default=None, help="where the random model is written (default: a temp dir)")
    args = ap.parse_args()
    variant = "tiny" if args.tiny else args.variant
    with tempfile.TemporaryDirectory() as tmp:
        check(variant, Path(args.out), Path(args.work or tmp))


if __name__ == "__main__":
    main()
