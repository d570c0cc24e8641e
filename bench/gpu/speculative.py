"""Issue 34: the same run with and without ``rollout.speculative``, one call, each variant in its own child process.

    python bench/gpu/speculative.py --workload realistic --model DIR/FILE.gguf --data GSM8K.jsonl --out OUT.json
    python bench/gpu/speculative.py --workload anchor --shape qwen15 --out OUT.json

``realistic``: ``realistic.py``'s workload (SmolLM2-135M, GSM8K, 64 prompts x 8 samples, up to 1,024 tokens,
temperature 1.0, the math grader). ``anchor``: ``side_by_side.py``'s fixed-length random-weights run (EOS ignored,
so drafts have nothing to repeat: where speculation should not help). Each variant (``--methods``, default
off, ngram, group; off first, the reference) is the real ``Trainer`` in a fresh child process (the GPU is freed when
it exits, and vLLM's ngram drafter imports numba, after which a vLLM engine built in the same process crashes);
``algorithm.old_logprobs=recompute`` so every step measures the engine's log-probs against the trainer's, and
the length and reward tests compare training runs, whose policies part after the first update: for the sampler
itself see ``tests/rl/test_speculative_sampling.py`` (one policy, 2,000 prompts, calibration under the policy).
Per variant: generation seconds per step (median, warm-up step dropped), the speculative counters (acceptance
rate, accepted tokens per draft, decode steps per token), the engine-vs-trainer log-prob gap (max over steps),
and against ``off`` the ratio of generation time and two-sample KS tests on the response lengths (tokens,
re-tokenised from samples/) and the rewards, with both sample sizes and p-values. Both workloads see each prompt
once, so ``group`` drafts only from a step's siblings that finished first (the tail it is meant to shorten).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from reasoning_rl.rollout.exactness import ks_2samp

sys.path.insert(0, str(Path(__file__).resolve().parent))

WORK = Path("/tmp/rrl_spec")
SPEC_KEYS = ("acceptance_rate", "accepted_len_mean", "steps_per_token")


def variant_config(args: argparse.Namespace, method: str) -> Any:
    """The workload's config with ``rollout.speculative.method=method`` and a recompute of the old log-probs."""
    import torch

    from reasoning_rl.config import SpeculativeConfig

    run_dir = WORK / f"run_{args.workload}_{method}"
    if args.workload == "realistic":
        from realistic import real_config

        cfg = real_config(args.model, args.data, run_dir, args.steps, torch.cuda.is_available())
    else:
        from side_by_side import anchor_config

        cfg = anchor_config(
            args.shape, args.steps, WORK
        )  # the same random model and prompts for every variant
        cfg.run.dir = str(run_dir)
        cfg.logging.samples = True
    cfg.rollout.speculative = SpeculativeConfig(
        method=method,
        num_speculative_tokens=args.k,
        lookup_min=args.lookup_min,
        lookup_max=args.lookup_max,
    )
    cfg.algorithm.old_logprobs = "recompute"
    return cfg


def run_variant(args: argparse.Namespace, method: str) -> dict[str, Any]:
    """Child process: train, then read the run's metrics and samples back."""
    from floors import train_then_floors

    from reasoning_rl.factory import resolve_model_dir
    from reasoning_rl.policy.model import load_tokenizer
    from reasoning_rl.trainer.metrics import read_metrics

    cfg = variant_config(args, method)
    wall, _, _ = train_then_floors(cfg, [])
    rows = [r for r in read_metrics(cfg.run_dir / "metrics.jsonl") if "time/step_s" in r][1:]  # 1st: warm-up
    tok = load_tokenizer(str(resolve_model_dir(cfg)))
    lengths, rewards = [], []
    for path in sorted((cfg.run_dir / "samples").glob("step_*.jsonl"))[1:]:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            lengths.append(float(len(tok(row["response"], add_special_tokens=False)["input_ids"])))
            rewards.append(float(row.get("score", 0.0)))

    def med(key: str) -> float | None:
        vals = [float(r[key]) for r in rows if isinstance(r.get(key), int | float)]
        return round(statistics.median(vals), 4) if vals else None

    return {
        "method": method,
        "wall_s": round(wall, 1),
        "generate_s_per_step": [round(float(r.get("time/generate_s", 0.0)), 3) for r in rows],
        "generate_s_median": med("time/generate_s"),
        "gen_tokens_per_s_median": med("throughput/gen_tokens_per_s"),
        **{k: med(f"speculative/{k}") for k in SPEC_KEYS},
        "logprob_diff_max": max(
            (float(r["rollout/logprob_diff_max"]) for r in rows if "rollout/logprob_diff_max" in r),
            default=None,
        ),
        "logprob_diff_mean_median": med("rollout/logprob_diff_mean"),
        "response_lengths": lengths,
        "rewards": rewards,
    }


def compare(ref: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A variant against ``off``: generation-time ratio and the distribution tests."""
    a, b = ref.get("generate_s_median"), run.get("generate_s_median")
    return {
        "generate_speedup": round(a / b, 3) if a and b else None,
        "ks_response_length": ks_2samp(ref["response_lengths"], run["response_lengths"]),
        "ks_reward": ks_2samp(ref["rewards"], run["rewards"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("realistic", "anchor"), default="realistic")
    ap.add_argument("--model", type=Path, help="realistic: the SmolLM2 GGUF file")
    ap.add_argument("--data", type=Path, help="realistic: GSM8K JSONL (datasets/recipes/gsm8k.py)")
    ap.add_argument("--shape", default="qwen15", help="anchor: a shapes.py model shape")
    ap.add_argument("--steps", type=int, default=4, help="measured steps (one warm-up step more)")
    ap.add_argument("--methods", default="off,ngram,group", help="comma-separated; off is always run first")
    ap.add_argument("--k", type=int, default=4, help="rollout.speculative.num_speculative_tokens")
    ap.add_argument("--lookup-min", type=int, default=2)
    ap.add_argument("--lookup-max", type=int, default=4)
    ap.add_argument("--only", help=argparse.SUPPRESS)  # child process: run this one method
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    if args.workload == "realistic" and (args.model is None or args.data is None):
        ap.error("--workload realistic needs --model and --data")
    WORK.mkdir(parents=True, exist_ok=True)
    if args.only:
        args.out.write_text(json.dumps(run_variant(args, args.only)))
        return
    methods = ["off", *(m for m in args.methods.split(",") if m and m != "off")]
    runs: dict[str, dict[str, Any]] = {}
    for method in methods:
        child = WORK / f"{args.workload}_{method}.json"
        cmd = [sys.executable, __file__, *sys.argv[1:], "--only", method, "--out", str(child)]
        subprocess.run(cmd, check=True)  # the child's --out comes last, so it wins
        runs[method] = json.loads(child.read_text())
    result = {
        "workload": args.workload,
        "steps": args.steps,
        "k": args.k,
        "lookup": [args.lookup_min, args.lookup_max],
        "runs": {
            m: {k: v for k, v in r.items() if k not in ("response_lengths", "rewards")}
            for m, r in runs.items()
        },
        "vs_off": {m: compare(runs["off"], runs[m]) for m in methods if m != "off"},
    }
    args.out.write_text(json.dumps(result, indent=1))
    print("SPECULATIVE " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
