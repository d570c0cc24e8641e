"""Issue 20: a realistic reasoning workload, ours (the real ``Trainer``, as ``rrl train`` runs it) vs TRL 1.16.

    python bench/gpu/realistic.py --model DIR/FILE.gguf|HF_DIR --data GSM8K.jsonl --trl bench/gpu/trl_realistic.py --out OUT.json

SmolLM2-135M-Instruct (the GGUF, converted by our code path), its chat template, GSM8K test questions (the
``datasets/recipes/gsm8k.py`` rows: question + "put the final answer in \\boxed{}"), ``REAL_PROMPTS`` (64)
prompts x 8 samples per step, up to ``REAL_MAX_TOKENS`` (1024) new tokens with EOS honoured, temperature 1.0,
the math grader (lenient) in the loop, one optimizer step per batch, beta = 0, vLLM colocated at 0.3 of the
GPU and kept awake (as TRL runs it). Ours runs in a child process (the GPU is freed when it exits), then TRL's
bench, back to back in the same call. Tokens/s counts real tokens (prompt + response of every sample).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402

PROMPTS = int(os.environ.get("REAL_PROMPTS", 64))
GENS = int(os.environ.get("REAL_GENS", 8))
MAX_TOKENS = int(os.environ.get("REAL_MAX_TOKENS", 1024))
TEMPERATURE = float(os.environ.get("REAL_TEMPERATURE", 1.0))  # TRL's side (trl_realistic.py) reads it too
# issue 31: 0 = synchronous steps; > 0 = continuous rollouts (B x (1 + lag) groups stay admitted, resident)
MAX_LAG = int(os.environ.get("REAL_MAX_LAG", 0))
# 0: the full pass over every row (matched work with peers that do not skip zero-advantage rows)
LR = float(os.environ.get("REAL_LR", 1e-6))  # TRL's side reads it too
SKIP_ZERO_ADV = os.environ.get("REAL_SKIP_ZERO_ADV", "1") == "1"
# 65,536: 7 micro-batches instead of 12 at 32,768 (the update is host-bound at this model size: fewer, larger
# blocks; floors_real_20.json: 2.78 s -> 2.00 s), peak memory 75.9 GiB of the H200's 140 with vLLM at 0.3.
MICRO_TOKENS = int(os.environ.get("OURS_MICRO_TOKENS", 65536))
OURS_COMPILE = os.environ.get("OURS_COMPILE", "1") == "1"
# issue 44: 1 = the engine in a rollout rank of its own on the trainer's GPU (resources.share_gpus, split
# placement through a local Ray instance), decoding while the update runs when MAX_LAG > 0
SHARE = os.environ.get("REAL_SHARE", "0") == "1"
PEAK_FLOPS = 790e12  # bf16 dense matmul measured on this H200 kind (KINDS.md)
SMOL = dict(  # SmolLM2-135M: the FLOP count of the update (6N + causal attention)
    vocab=49152, hidden=576, inter=1536, layers=30, heads=9, kv_heads=3
)


def smol_params() -> int:
    h, i, layers, v = SMOL["hidden"], SMOL["inter"], SMOL["layers"], SMOL["vocab"]
    kv = SMOL["kv_heads"] * (h // SMOL["heads"])
    return layers * (h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h) + v * h + h


def update_flops(tokens: float, seq_lens: list[int]) -> float:
    """fwd+bwd FLOPs of real (unpadded) tokens: 6N per token (``tokens``: exact) + causal attention,
    6·layers·hidden·len per token (``seq_lens``: re-tokenised lengths, only this ~5-10 % term uses them)."""
    attention = sum(6.0 * SMOL["layers"] * SMOL["hidden"] * s * s for s in seq_lens)
    return 6.0 * smol_params() * tokens + attention


def time_weighted(rows: list[dict[str, Any]], key: str) -> float:
    """A per-step engine figure averaged over generation time (each step weighted by its ``time/generate_s``)."""
    pairs = [(float(r[key]), float(r.get("time/generate_s", 0.0))) for r in rows if key in r]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total > 0 else float("nan")


def computed_flops(row: dict[str, Any], seq_lens: list[int]) -> float:
    """The update's FLOPs over the rows it computed: ``policy/computed_tokens`` of the step's tokens (skipped
    zero-advantage rows cost nothing), the attention term scaled by the same share (which rows were skipped is
    not in the metrics; the term is ~5-10 % of the total)."""
    total = float(row["throughput/train_tokens"])
    computed = float(row.get("throughput/computed_tokens", total))
    share = computed / total if total else 0.0
    return update_flops(computed, []) + share * (update_flops(0.0, seq_lens))


def hf_model_dir(model: Path) -> Path:
    """The HF dir both sides load: ``model`` itself (an SFT export), or the dir our run converts a GGUF file to."""
    return (
        model
        if model.is_dir()
        else (Path(".cache") / "converted" / model.stem.lower().replace(".", "-")).resolve()
    )


def real_config(model: Path, data: Path, run_dir: Path, steps: int, on_gpu: bool) -> Any:
    """The realistic workload as one of our run configs (``rrl train`` would take the same keys as YAML);
    ``model``: a GGUF file (converted by our code path) or an HF model dir."""
    from reasoning_rl.config import load_config

    source = {"path": str(model)} if model.is_dir() else {"path": str(model.parent), "gguf_file": model.name}

    return load_config(
        None,
        base={
            "run": {"name": "real", "dir": str(run_dir), "doctor": False},
            "model": {
                **source,
                "dtype": "bfloat16" if on_gpu else "float32",
                "compile": OURS_COMPILE and on_gpu,
            },
            "data": {
                "train": {"path": str(data), "limit": PROMPTS * (steps + 1)},
                "chat_template": True,
                "shuffle": False,
                "max_prompt_tokens": 1024,
                "grader_map": {"gsm8k": "math", "word_chain": "math"},
            },
            "rollout": {
                "n": GENS,
                "max_tokens": MAX_TOKENS,
                "temperature": TEMPERATURE,
                "ignore_eos": False,
                "gpu_memory_utilization": 0.3 if on_gpu else 0.2,
                "seed_per_sample": False,
                "engine_args": {"max_num_seqs": PROMPTS * GENS * (1 + MAX_LAG)} if on_gpu else {},
                "sleep": False,
                "max_lag": MAX_LAG,
            },
            "algorithm": {
                "micro_batch_tokens": MICRO_TOKENS,
                "mini_batch_size": PROMPTS * GENS,
                "skip_zero_advantage": SKIP_ZERO_ADV,
            },
            "optim": {"lr": LR},
            "grading": {
                "workers": 8 if on_gpu else 2,
                "cache": False,
                "options": {"math": {"mode": "lenient"}},
            },
            "trainer": {
                "steps": steps + 1,
                "batch_size": PROMPTS,
                "checkpoint_every": 0,
                "export": False,
                "overwrite": True,
            },
            "logging": {"console": "plain", "tensorboard": False, "samples": True},
            "resources": {"placement": "split", "rollout_ranks": 1, "share_gpus": True} if SHARE else {},
        },
    )


def summarise_ours(run_dir: Path) -> dict[str, Any]:
    import torch

    from reasoning_rl.step_cost import pooled
    from reasoning_rl.trace import read_trace
    from reasoning_rl.trainer.metrics import read_metrics

    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "time/step_s" in r][1:]  # 1st = warm-up
    trace = run_dir / "trace.jsonl"
    measured = {int(r["step"]) for r in rows}
    step_cost = pooled(read_trace(trace).counters, measured) if trace.exists() else []

    def med(key: str) -> float:
        vals = [float(r[key]) for r in rows if key in r]
        return statistics.median(vals) if vals else float("nan")

    per_step = []
    for r in rows:
        toks = float(r["throughput/train_tokens"])  # prompt + response tokens of the batch (real, no padding)
        per_step.append(
            {
                "step": int(r["step"]),
                "step_s": round(float(r["time/step_s"]), 3),
                "generate_s": round(float(r.get("time/generate_s", 0.0)), 3),
                "update_s": round(float(r.get("time/update_s", 0.0)), 3),
                "real_tokens": int(toks),
                "response_tokens": int(r.get("samples", 0) * r.get("response/length_mean", 0)),
                "computed_tokens": float(r.get("throughput/computed_tokens", toks)),
                "skipped_rows": float(r.get("policy/skipped_rows", 0.0)),
                "reward": float(r.get("reward/mean", float("nan"))),
            }
        )
    step_s = med("time/step_s")
    spans = {
        k: round(med(k), 4)
        for k in sorted({k for r in rows for k in r if k.startswith("time/") and k != "time/step_s"})
    }
    accounted = sum(v for v in spans.values() if v == v)
    return {
        "system": "reasoning-rl",
        "prompts": PROMPTS,
        "gens": GENS,
        "max_tokens": MAX_TOKENS,
        "micro_batch_tokens": MICRO_TOKENS,
        "compile": OURS_COMPILE,
        "steps": per_step,
        "step_s_median": round(step_s, 3),
        "real_tokens_median": round(med("throughput/train_tokens")),
        "skip_zero_advantage": SKIP_ZERO_ADV,
        # Σtokens/Σtime over the measured steps (never a median of per-step rates: bench/gpu/throughput.py)
        "tokens_per_s": round(
            throughput.rate([s["real_tokens"] for s in per_step], [s["step_s"] for s in per_step])
        ),
        "gen_tokens_per_s_in_generate": round(
            throughput.rate([s["response_tokens"] for s in per_step], [s["generate_s"] for s in per_step])
        ),
        "skipped_rows_median": med("policy/skipped_rows"),
        "spans_s": spans,
        "other_s": round(step_s - accounted, 4),
        "grade_wait_share": round(med("time/grade_wait_s") / step_s, 4),
        "max_lag": MAX_LAG,  # issue 31: the engine's running batch and the trained tokens' lag
        "share_gpus": SHARE,
        # over generation time, not a median of steps (continuous steps alternate short and long)
        "running_full_frac": round(time_weighted(rows, "rollout/running_full_frac"), 3),
        "running_mean": round(time_weighted(rows, "rollout/running_mean"), 1),
        "lag_mean_median": round(med("staleness/lag_mean"), 3),
        # issue 44: engine steps by running batch over the measured steps (reasoning_rl/step_cost)
        "step_cost": [asdict(b) for b in step_cost],
        "update_mfu": round(
            statistics.median(
                computed_flops(r, _lens(run_dir, int(r.get("step", i + 2))))
                / float(r["time/update_s"])
                / PEAK_FLOPS
                for i, r in enumerate(rows)
            ),
            3,
        )
        if torch.cuda.is_available()
        else None,
        "handoff_s": round(med("handoff/seconds"), 3),
        "handoff_gbps": round(med("handoff/gbps"), 2),
        "response_len_mean": round(med("response/length_mean"), 1),
        "response_len_max": max(float(r["response/length_max"]) for r in rows),
        "truncation_rate": round(med("response/truncation_rate"), 4),
        "reward_mean": round(med("reward/mean"), 4),
        "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if torch.cuda.is_available()
        else None,
        "all_metrics_last_step": rows[-1] if rows else {},
    }


def _lens(run_dir: Path, step: int) -> list[int]:
    return [int(x) for x in (run_dir / "seq_lens" / f"{step}.txt").read_text().split()]


def record_lengths(run_dir: Path, tokenizer: Any) -> None:
    """Per step, each sample's prompt + response token count (the update's FLOPs), re-tokenised from samples/
    (+1 for the EOS the text drops; a decode/encode round trip can differ by a token or two)."""
    out = run_dir / "seq_lens"
    out.mkdir(exist_ok=True)
    for path in sorted((run_dir / "samples").glob("step_*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        lens = []
        for row in rows:
            text = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
            both = tokenizer([text, row["response"]], add_special_tokens=False)["input_ids"]
            lens.append(len(both[0]) + len(both[1]) + 1)
        (out / f"{path.stem.split('_')[1]}.txt").write_text(" ".join(map(str, lens)))


class GcClock:
    """Wall time of each Python garbage collection (``gc.callbacks``), to set against the trace's spans."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []  # (start, seconds, generation)
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.time()
        else:
            self.pauses.append((self._start, time.time() - self._start, int(info["generation"])))

    def during(self, trace: Path, stage: str) -> dict[int, dict[str, float]]:
        """Per step: seconds of GC and full (gen-2) collections inside that step's ``stage`` span."""
        out: dict[int, dict[str, float]] = {}
        for line in trace.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("type") != "span" or rec.get("stage") != stage:
                continue
            inside = [p for p in self.pauses if rec["start"] <= p[0] < rec["end"]]
            out[int(rec["step"])] = {
                "gc_s": round(sum(p[1] for p in inside), 4),
                "collections": len(inside),
                "full": sum(1 for p in inside if p[2] == 2),
            }
        return out


def run_ours(model: Path, data: Path, steps: int, work: Path, floors: bool) -> dict[str, Any]:
    """The run as ``rrl train`` runs it; with ``floors``, then each stage alone on the run's own batches."""
    import gc

    import torch
    from floors import train_then_floors, with_floor_ratios

    from reasoning_rl.factory import resolve_model_dir
    from reasoning_rl.policy.model import load_tokenizer

    on_gpu = torch.cuda.is_available()
    cfg = real_config(model, data, work / "run_real", steps, on_gpu)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    clock = GcClock()
    gc.callbacks.append(clock)
    try:
        wall, graphs, replay = train_then_floors(cfg, list(range(2, steps + 2)) if floors else [])
    finally:
        gc.callbacks.remove(clock)
    tok = load_tokenizer(str(resolve_model_dir(cfg)))
    record_lengths(cfg.run_dir, tok)
    out = summarise_ours(cfg.run_dir)
    out["wall_s"] = round(wall, 1)
    out["gc_during_generate"] = clock.during(cfg.run_dir / "trace.jsonl", "generate")
    out["dynamo_after_run"] = graphs
    if replay is not None:
        with_floor_ratios(out, replay)
    return out


def run_trl(model_dir: Path, data: Path, steps: int, trl_bench: str, timeout: int) -> dict[str, Any]:
    cmd = [sys.executable, trl_bench, str(model_dir), str(data), str(PROMPTS), str(GENS), str(MAX_TOKENS)]
    cmd.append(str(steps + 1))
    t = time.time()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        text = out.stdout + out.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        text += "\nTIMEOUT"
    Path("/tmp/rrl_real/trl.log").write_text(text)
    for line in text.splitlines():
        if line.startswith("RESULT "):
            res: dict[str, Any] = json.loads(line[len("RESULT ") :])
            res["wall_s"] = round(time.time() - t, 1)
            return res
    steps_seen = [line for line in text.splitlines() if line.startswith("STEP ")]
    return {"system": "trl", "error": text[-3000:], "steps_seen": steps_seen}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, type=Path, help="GGUF file or HF model dir")
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--trl", default=None, help="path to trl_realistic.py; omit to run ours only")
    ap.add_argument("--trl-timeout", type=int, default=330)
    ap.add_argument("--floors", action="store_true", help="then each stage alone on the run's batches")
    ap.add_argument("--only-ours", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    work = Path("/tmp/rrl_real")
    work.mkdir(parents=True, exist_ok=True)
    if args.only_ours:  # child process: the GPU is all ours, and freed entirely when we exit
        result = run_ours(args.model, args.data, args.steps, work, args.floors)
        Path(args.out).write_text(json.dumps(result, default=str))
        return
    child = work / "ours.json"
    cmd = [sys.executable, __file__, "--model", str(args.model), "--data", str(args.data)]
    if args.floors:
        cmd.append("--floors")
    subprocess.run([*cmd, "--steps", str(args.steps), "--only-ours", "--out", str(child)], check=True)
    result: dict[str, Any] = {"workload": "realistic", "ours": json.loads(child.read_text())}
    if args.trl:
        result["trl"] = run_trl(hf_model_dir(args.model), args.data, args.steps, args.trl, args.trl_timeout)
        trl = result["trl"]
        if trl.get("steps") and trl.get("real_tokens"):  # Σtokens/Σtime, TRL's first step is warm-up
            n = len(trl["steps"])
            runs = [
                {
                    "name": "ours",
                    "steps_s": [s["step_s"] for s in result["ours"]["steps"]],
                    "tokens": [s["real_tokens"] for s in result["ours"]["steps"]],
                },
                {"name": "trl", "steps_s": trl["steps"][1:], "tokens": trl["real_tokens"][1:n]},
            ]
            result["ratio_tokens_per_s"] = throughput.summarise(runs)["ratios"]["ours / trl"]
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    short = {k: v for k, v in result["ours"].items() if k not in ("all_metrics_last_step",)}
    print("OURS " + json.dumps(short, default=str)[:3000], flush=True)
    print("TRL " + json.dumps(result.get("trl"), default=str)[:3000], flush=True)
    print("RATIO", result.get("ratio_tokens_per_s"), flush=True)


if __name__ == "__main__":
    main()
