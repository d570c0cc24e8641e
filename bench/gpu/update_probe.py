"""Update-phase throughput of ``Policy.train_step`` alone (no vLLM in the process), per setting, + a profile.

    python bench/gpu/update_probe.py SHAPE OUT_DIR [SETTING ...]     SETTING = eager:ROWS | compile:ROWS

The side-by-side workload's update: 256 sequences x 384 tokens (128 prompt + 256 response), one optimizer
step, micro-batches of ROWS sequences. Prints tokens/s and MFU per setting (peak 790 TFLOP/s bf16, the
measured figure for this H200 kind) and writes the top CUDA kernels of one profiled step of the last
setting to OUT_DIR/update_profile.txt, so a slow update shows where its time goes. OUT_DIR/update_probe.json is
``throughput.result``'s format: one run per setting, its measured steps (all but the first: compile) with their
tokens, so ratios are Σtokens/Σtime. ``UPDATE_STEPS`` (default 4) steps per setting; ``UPDATE_PROFILE=0`` skips
the profile; ``UPDATE_LOG=1`` prints ``STEP <end time> <seconds> <tokens>`` after each step.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import build_random_model, train_flops  # noqa: E402
from throughput import result, table  # noqa: E402

from reasoning_rl.algorithms import LossConfig, compute_advantages  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402

PEAK_FLOPS = 790e12
ROWS, PROMPT, SEQ = 256, 128, 384
STEPS = int(os.environ.get("UPDATE_STEPS", "4"))


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measure(
    model_dir: Path, shape: str, compiled: bool, rows: int, profile_to: Path | None
) -> dict[str, Any]:
    dtype = "bfloat16" if torch.cuda.is_available() else "float32"
    policy = Policy.from_pretrained(
        str(model_dir), dtype=dtype, lr=1e-6, micro_batch_tokens=rows * SEQ, compile_layers=compiled
    )
    g = torch.Generator().manual_seed(7)
    vocab = policy.lm.config.vocab_size
    batch = TokenBatch([torch.randint(3, vocab, (SEQ,), generator=g) for _ in range(ROWS)], [PROMPT] * ROWS)
    adv = compute_advantages("grpo", torch.rand(ROWS, generator=g), torch.arange(ROWS) // 8)
    old = torch.full(batch.shape, -12.0)
    times = []
    for _ in range(STEPS):
        sync()
        t0 = time.perf_counter()
        policy.train_step(batch, adv, old, None, LossConfig())
        sync()
        times.append(time.perf_counter() - t0)
        if (
            os.environ.get("UPDATE_LOG") == "1"
        ):  # engine_mode.py's busy mode times each step against its rounds
            print(f"STEP {time.time():.3f} {times[-1]:.4f} {ROWS * SEQ}", flush=True)
    if profile_to is not None and torch.cuda.is_available():
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            policy.train_step(batch, adv, old, None, LossConfig())
            sync()
        profile_to.write_text(
            prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70)
        )
    step = sorted(times[1:])[len(times[1:]) // 2]
    tokens = ROWS * SEQ
    result = {
        "setting": f"{'compile' if compiled else 'eager'}:{rows}",
        "first_step_s": round(times[0], 2),
        "step_s": round(step, 3),
        "tokens_per_s": round(tokens / step),
        "mfu": round(train_flops(shape, tokens, SEQ) / step / PEAK_FLOPS, 3),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else 0.0,
        "name": f"{'compile' if compiled else 'eager'}:{rows}",
        "steps_s": [round(t, 4) for t in times[1:]],
        "tokens": [float(tokens)] * len(times[1:]),
    }
    del policy
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return result


def main() -> None:
    shape, out = sys.argv[1], Path(sys.argv[2])
    settings = sys.argv[3:] or ["eager:32", "compile:32", "compile:64"]
    out.mkdir(parents=True, exist_ok=True)
    model_dir = build_random_model(shape, Path(f"/tmp/rrl_bench/{shape}"))
    results = []
    for k, setting in enumerate(settings):
        mode, rows = setting.split(":")
        last = k == len(settings) - 1
        results.append(
            measure(
                model_dir,
                shape,
                mode == "compile",
                int(rows),
                out / "update_profile.txt" if last and os.environ.get("UPDATE_PROFILE") != "0" else None,
            )
        )
        print("UPDATE " + json.dumps(results[-1]), flush=True)
    workload = {
        "name": "update",
        "model": f"{shape} shape, random init",
        "sequences": ROWS,
        "prompt_tokens": PROMPT,
        "response_tokens": SEQ - PROMPT,
        "steps": f"{STEPS} per setting, the first (compile) not measured",
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    summary = result(workload, results)
    (out / "update_probe.json").write_text(json.dumps(summary, indent=1))
    print(table(summary))
    print(f"{'setting':<12} {'step s':>7} {'tokens/s':>9} {'MFU':>6} {'first s':>8} {'peak GiB':>9}")
    for r in results:
        print(
            f"{r['setting']:<12} {r['step_s']:>7} {r['tokens_per_s']:>9} {r['mfu']:>6} {r['first_step_s']:>8} {r['peak_mem_gib']:>9}"
        )


if __name__ == "__main__":
    main()
