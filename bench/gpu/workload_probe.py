"""Does a workload teach anything? Step-1 statistics of a policy on a workload's rows at a few temperatures.

    python bench/gpu/workload_probe.py MODEL_DIR --data ROWS.jsonl --temperatures 1.0,1.2 [--prompts 64]
        [--out OUT.json]

ROWS are verl-style rows (``datasets/recipes/word_chain.py`` or ``gsm8k.py``: a chat prompt and
``reward_model.ground_truth``). For each temperature it samples ``--samples`` responses to each of the first
``--prompts`` rows up to ``--max-tokens`` with the model's chat template (vLLM), grades them with the math grader
(lenient, as the benches do), and reports what a GRPO step would see: mean reward, the response-length
distribution (p10/p50/p90, share at the cap) and the share of groups with zero reward spread (which the update
skips or learns nothing from). A workload learns when the mean reward is 0.2-0.8, p50 >= 200 tokens, >= 10 % at
the cap and <= 50 % of groups have zero spread (issue 42); the first temperature that meets all four is printed
as ``CHOSEN``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402


def stats(lengths: list[int], groups: list[list[float]], cap: int) -> dict[str, Any]:
    """What a GRPO step sees in one batch of groups."""
    lens = sorted(lengths)
    rewards = [r for g in groups for r in g]
    return {
        "samples": len(lens),
        "reward_mean": round(statistics.mean(rewards), 3),
        "len_p10": lens[len(lens) // 10],
        "len_p50": lens[len(lens) // 2],
        "len_p90": lens[9 * len(lens) // 10],
        "len_mean": round(statistics.mean(lens), 1),
        "at_cap": round(sum(n >= cap for n in lens) / len(lens), 3),
        "zero_spread_groups": round(sum(len(set(g)) == 1 for g in groups) / len(groups), 3),
    }


def learns(s: dict[str, Any]) -> bool:
    """Issue 42's bar for a workload that learns."""
    return (
        0.2 <= s["reward_mean"] <= 0.8
        and s["len_p50"] >= 200
        and s["at_cap"] >= 0.10
        and s["zero_spread_groups"] <= 0.5
    )


def probe_run(
    temperature: float, seconds: float, prompt_tokens: int, lengths: list[int], groups: list[list[float]]
) -> dict[str, Any]:
    """One temperature's pass as a raw run (one "step": the whole generation), so the file's throughput can be
    recomputed like every GPU result: prompt + generated tokens, generated alone, the mean reward."""
    rewards = [score for group in groups for score in group]
    return {
        "name": f"probe:t{temperature:g}",
        "steps_s": [round(seconds, 3)],
        "tokens": [prompt_tokens + sum(lengths)],
        "gen_tokens": [sum(lengths)],
        "reward": [round(statistics.fmean(rewards), 4) if rewards else 0.0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument(
        "--data", type=Path, required=True, help="verl-style rows (prompt, reward_model.ground_truth)"
    )
    ap.add_argument("--temperatures", default="1.0", help="comma-separated")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch
    from vllm import LLM, SamplingParams

    import graders

    lines = args.data.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()][: args.prompts]
    gpu = torch.cuda.is_available()
    llm = LLM(
        args.model,
        dtype="bfloat16" if gpu else "float32",
        seed=args.seed,
        max_model_len=2048,
        gpu_memory_utilization=0.3 if gpu else 0.2,
    )
    results, runs = [], []
    for temperature in (float(t) for t in args.temperatures.split(",")):
        sampling = SamplingParams(n=args.samples, temperature=temperature, max_tokens=args.max_tokens)
        t = time.perf_counter()
        outs = llm.chat([r["prompt"] for r in rows], sampling, use_tqdm=False)
        seconds = time.perf_counter() - t
        lengths, groups, prompt_tokens = [], [], 0
        for row, out in zip(rows, outs, strict=True):
            gold = str(row["reward_model"]["ground_truth"])
            lengths += [len(c.token_ids) for c in out.outputs]
            prompt_tokens += len(out.prompt_token_ids or []) * len(out.outputs)
            groups.append([graders.grade("math", c.text, gold, mode="lenient").score for c in out.outputs])
        s: dict[str, Any] = {"temperature": temperature}
        s.update(stats(lengths, groups, args.max_tokens))
        s.update(generate_s=round(seconds, 2), learns=learns(s))
        results.append(s)
        runs.append(probe_run(temperature, seconds, prompt_tokens, lengths, groups))
        print("PROBE " + json.dumps(s), flush=True)
    chosen = next((r for r in results if r["learns"]), None)
    print("CHOSEN " + json.dumps(chosen), flush=True)
    if args.out:
        workload = {  # what each temperature sampled: one generation pass of the first rows, no update
            "model": args.model,
            "data": args.data.name,
            "prompts": len(rows),
            "samples_per_prompt": args.samples,
            "max_tokens": args.max_tokens,
            "temperatures": [r["temperature"] for r in results],
        }
        doc = throughput.result(workload, runs, gpu=gpu, results=results, chosen=chosen)
        args.out.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
