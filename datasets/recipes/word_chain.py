"""The GPU benches' learning workload as verl-style rows (what ``gsm8k.py`` writes), for ours and TRL alike.

    python datasets/recipes/word_chain.py OUT.jsonl [--size 1344] [--seed 0] [--steps 2] [--max-operand 20]

Word problems of chained additions/subtractions (``reasoning_rl.data.generators.word_chain``) with GSM8K's
instruction (think step by step, final answer in ``\\boxed{}``). Why this task: SmolLM2-135M-Instruct, the real
model we have offline, earns ~0.01 on GSM8K, so almost every group has equal rewards and an update has nothing
to learn; on these it solves a part with a worked chain of thought (bench/RESULTS.md: reward, lengths).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gsm8k import SUFFIX  # the same instruction as the GSM8K ("hard") workload

from reasoning_rl.data.generators import word_chain


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", type=int, default=1344)  # 64 prompts x 21 steps
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--max-operand", type=int, default=20)
    args = ap.parse_args()
    rows = word_chain(args.size, args.seed, steps=args.steps, max_operand=args.max_operand)
    with args.out.open("w", encoding="utf-8") as fh:
        for i, row in enumerate(rows):
            rec = {
                "data_source": "word_chain",
                "ability": "math",
                "prompt": [{"role": "user", "content": row["question"] + SUFFIX}],
                "reward_model": {"style": "rule", "ground_truth": row["answer"]},
                "extra_info": {"index": i, "id": row["id"]},
            }
            fh.write(json.dumps(rec) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
