"""Our GRPO step (the real ``Trainer``, as ``rrl train`` runs it) vs TRL's GRPOTrainer, same GPU, same call.

    python bench/gpu/side_by_side.py SHAPE [--steps 5] [--trl PATH/trl_bench.py] --out OUT.json

Same workload as TRL's measured bench: random-init model of SHAPE, 32 prompts x 8 generations per step,
128 prompt tokens, 256 generated tokens (EOS ignored: fixed length), one optimizer step per generation
round (mini-batch = the whole batch), beta = 0. TRL runs micro-batches of 32 sequences (its measured
setting) with vLLM sleep mode off; ours run ``OURS_MICRO`` sequences (default 64) with ``model.compile``
on, one engine-wide sampling seed (TRL's setting too), and vLLM sleep off like TRL (``OURS_SLEEP=1``: level-2
sleep during the update, as a memory-tight run would use). Reports step time, tokens/s/GPU,
generation tokens/s, update-phase MFU (FLOPs from the model shape), hand-off seconds and GB/s, reward
wait, peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402
from shapes import SHAPES, build_random_model, random_prompts, train_flops  # noqa: E402

PROMPTS, GENS, PROMPT_LEN, MICRO = int(os.environ.get("SBS_PROMPTS", 32)), 8, 128, 32
COMPLETION_LEN = int(os.environ.get("SBS_COMPLETION_LEN", 256))  # smaller only to try the script on CPU
OURS_MICRO = int(os.environ.get("OURS_MICRO", 64))
# the update's token budget per micro-batch; OURS_MICRO_TOKENS sets it outright (the prompts' real length comes from
# the tokenizer: ~192 tokens, not 128, so OURS_MICRO x 384 fits fewer rows than OURS_MICRO: 64 -> 5 micro-batches)
# "plan": none set, so the product's default decides: the largest micro-batch the memory plan allows on this card
# (`rrl train --dry-run --plan-for h200` prints it: 78,848 tokens on an H200, 39,936 on an H100 80GB)
_MICRO_TOKENS = os.environ.get("OURS_MICRO_TOKENS", "0")
OURS_MICRO_TOKENS: int | None = (
    None if _MICRO_TOKENS == "plan" else int(_MICRO_TOKENS or 0) or OURS_MICRO * (PROMPT_LEN + COMPLETION_LEN)
)
OURS_COMPILE = os.environ.get("OURS_COMPILE", "1") == "1"
OURS_SLEEP = os.environ.get("OURS_SLEEP", "0") == "1"
# 1: vLLM's engine core in a process of its own (rollout.engine_process; 1.045x on one H100)
OURS_ENGINE_PROCESS = os.environ.get("OURS_ENGINE_PROCESS", "0") == "1"
# N > 1: that many engine cores, each in a process of its own with 1/N of the requests (rollout.engine_cores; needs
# OURS_ENGINE_PROCESS=1; two cores decoded 1.9x one under py-spy in bench/gpu/engine_mode.py mp2)
OURS_ENGINE_CORES = int(os.environ.get("OURS_ENGINE_CORES", "1"))
OURS_ENGINE_ARGS = json.loads(os.environ.get("OURS_ENGINE_ARGS", "{}"))  # e.g. '{"async_scheduling": true}'
PEAK_FLOPS = 790e12  # bf16 dense matmul measured on this H200 kind (KINDS.md)


def write_prompts(path: Path, vocab: int, steps: int) -> None:
    """The same random prompts TRL's bench draws (torch seed 1), as simple-schema rows."""
    with path.open("w") as fh:
        for i, text in enumerate(random_prompts(vocab, PROMPTS * (steps + 1), PROMPT_LEN)):
            fh.write(json.dumps({"id": i, "question": text, "answer": "0"}) + "\n")


def anchor_config(shape: str, steps: int, work: Path) -> Any:
    """The fixed-length anchor as one of our run configs (``floors.py`` builds the same components from it)."""
    import torch

    from reasoning_rl.config import load_config

    model = build_random_model(shape, work / f"model_{shape}")
    data = work / f"prompts_{shape}.jsonl"
    write_prompts(data, SHAPES[shape]["vocab_size"], steps)
    run_dir = work / f"run_{shape}"
    return load_config(
        None,
        base={
            "run": {"name": f"sbs_{shape}", "dir": str(run_dir), "doctor": False},
            "model": {
                "path": str(model),
                "dtype": "bfloat16" if torch.cuda.is_available() else "float32",
                "compile": OURS_COMPILE,
            },
            "data": {
                "train": {"path": str(data)},
                "chat_template": False,
                "shuffle": False,
                "max_prompt_tokens": 1024,
            },  # same text as TRL; its tokenizer decides the length
            "rollout": {
                "n": GENS,
                "max_tokens": COMPLETION_LEN,
                "temperature": 1.0,
                "ignore_eos": True,
                "gpu_memory_utilization": 0.3,
                "seed_per_sample": False,
                "engine_args": {"max_num_seqs": PROMPTS * GENS, **OURS_ENGINE_ARGS},
                "sleep": OURS_SLEEP,
                "engine_process": OURS_ENGINE_PROCESS,
                "engine_cores": OURS_ENGINE_CORES,
            },
            "algorithm": {
                "micro_batch_tokens": OURS_MICRO_TOKENS,
                "mini_batch_size": PROMPTS * GENS,
                "skip_zero_advantage": False,  # matched work: TRL runs the full pass over every row
            },
            "optim": {"lr": 1e-6},
            "grading": {"workers": 8, "cache": False, "options": {"math": {"mode": "lenient"}}},
            "trainer": {
                "steps": steps + 1,
                "batch_size": PROMPTS,
                "checkpoint_every": 0,
                "export": False,
                "overwrite": True,
            },
            "logging": {"console": "plain", "tensorboard": False, "samples": False},
        },
    )


def run_ours(shape: str, steps: int, work: Path, floors: bool = False) -> dict[str, Any]:
    """The run as ``rrl train`` runs it; with ``floors``, then each stage alone on the run's own batches."""
    import torch
    from floors import train_then_floors, with_floor_ratios

    from reasoning_rl.trainer.metrics import read_metrics

    cfg = anchor_config(shape, steps, work)
    run_dir = cfg.run_dir
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    _, graphs, replay = train_then_floors(cfg, list(range(2, steps + 2)) if floors else [])
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time/step_s" in r][
        1:
    ]  # first step = warm-up

    def med(key: str) -> float:
        vals = [float(r[key]) for r in rows if key in r]
        return statistics.median(vals) if vals else float("nan")

    step_s = med("time/step_s")
    tokens = PROMPTS * GENS * (PROMPT_LEN + COMPLETION_LEN)
    update_s = med("time/update_s")
    seq = PROMPT_LEN + COMPLETION_LEN
    # MFU over the rows the update computed (policy/computed_tokens), per step, then the median
    mfus = [
        train_flops(shape, float(r.get("throughput/computed_tokens", tokens)), seq)
        / float(r["time/update_s"])
        / PEAK_FLOPS
        for r in rows
        if float(r.get("time/update_s", 0)) > 0
    ]
    out = {
        "system": "reasoning-rl",
        "shape": shape,
        "micro_seqs": OURS_MICRO,
        "micro_batch_tokens": OURS_MICRO_TOKENS if OURS_MICRO_TOKENS is not None else "plan",
        "micro_batches": med("policy/micro_batches"),
        "padding_share": med("policy/padding_share"),
        "compile": OURS_COMPILE,
        "sleep": OURS_SLEEP,
        "engine_args": OURS_ENGINE_ARGS,
        "engine_process": OURS_ENGINE_PROCESS,
        "engine_cores": OURS_ENGINE_CORES,
        "steps": [
            {
                "step": int(r["step"]),
                "step_s": round(float(r["time/step_s"]), 3),
                "real_tokens": tokens,  # nominal: fixed length, 32 x 8 x (128 + 256)
                "response_tokens": PROMPTS * GENS * COMPLETION_LEN,
                "computed_tokens": float(r.get("throughput/computed_tokens", tokens)),
                "skipped_rows": float(r.get("policy/skipped_rows", 0.0)),
            }
            for r in rows
        ],
        "step_s_median": round(step_s, 3),
        "tokens_per_s": round(throughput.rate([tokens] * len(rows), [float(r["time/step_s"]) for r in rows])),
        "generate_s": round(med("time/generate_s"), 3),
        "grade_wait_s": round(med("time/grade_wait_s"), 4),
        "grade_wait_share": round(med("time/grade_wait_s") / step_s, 4),
        "update_s": round(update_s, 3),
        "update_mfu": round(statistics.median(mfus), 3) if mfus else None,
        "skipped_rows_median": med("policy/skipped_rows"),
        "handoff_s": round(med("handoff/seconds"), 3),
        "handoff_gbps": round(med("handoff/gbps"), 2),
        "handoff_bytes": med("handoff/bytes"),
        "spans_s": {
            k: round(med(k), 4)
            for k in sorted({k for r in rows for k in r if k.startswith("time/") and k != "time/step_s"})
        },
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
        "all_metrics_last_step": rows[-1] if rows else {},
        "dynamo_after_run": graphs,
    }
    if replay is not None:
        with_floor_ratios(out, replay)
    return out


def run_trl(shape: str, steps: int, trl_bench: str) -> dict[str, Any]:
    env = dict(os.environ, MICRO=str(MICRO))
    cmd = [
        sys.executable,
        trl_bench,
        shape,
        str(PROMPTS),
        str(GENS),
        str(PROMPT_LEN),
        str(COMPLETION_LEN),
        str(steps + 1),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return {"system": "trl", "error": (out.stdout + out.stderr)[-3000:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("shape", choices=sorted(SHAPES))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--trl", default=None, help="path to trl_bench.py; omit to run ours only")
    ap.add_argument("--floors", action="store_true", help="then each stage alone on the run's batches")
    ap.add_argument("--only-ours", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    work = Path("/tmp/rrl_sbs")
    work.mkdir(parents=True, exist_ok=True)
    if args.only_ours:  # child process: the GPU is all ours, and freed entirely when we exit
        started = time.time()
        ours = run_ours(args.shape, args.steps, work, args.floors)
        ours["wall_s"] = round(time.time() - started, 1)
        Path(args.out).write_text(json.dumps(ours, default=str))
        return
    child = work / f"ours_{args.shape}.json"
    subprocess.run(
        [
            sys.executable,
            __file__,
            args.shape,
            "--steps",
            str(args.steps),
            "--only-ours",
            *(["--floors"] if args.floors else []),
            "--out",
            str(child),
        ],
        check=True,
        timeout=480,
    )
    result: dict[str, Any] = {"shape": args.shape, "ours": json.loads(child.read_text())}
    if args.trl:
        t = time.time()
        result["trl"] = run_trl(args.shape, args.steps, args.trl)
        result["trl"]["wall_s"] = round(time.time() - t, 1)
        if result["trl"].get("steps"):  # Σtokens/Σtime of the measured steps (TRL's first is warm-up)
            nominal = float(PROMPTS * GENS * (PROMPT_LEN + COMPLETION_LEN))
            ours_s = [s["step_s"] for s in result["ours"]["steps"]]
            trl_s = result["trl"]["steps"][1:]
            runs = [
                {"name": "ours", "steps_s": ours_s, "tokens": [nominal] * len(ours_s)},
                {"name": "trl", "steps_s": trl_s, "tokens": [nominal] * len(trl_s)},
            ]
            result["ratio_tokens_per_s"] = throughput.summarise(runs)["ratios"]["ours / trl"]
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print("RESULT " + json.dumps(result, default=str)[:4000], flush=True)


if __name__ == "__main__":
    main()
