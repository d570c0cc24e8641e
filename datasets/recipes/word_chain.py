"""The GPU benches' learning workload as verl-style rows (what ``gsm8k.py`` writes), for ours and TRL alike,
and the worked solutions of other problems as SFT rows for the warm start.

    python datasets/recipes/word_chain.py OUT.jsonl [--size 1344] [--seed 0] [--steps 2] [--max-steps 48]
        [--max-operand 20] [--sft SFT.jsonl --sft-size 4000]

Word problems of chained additions/subtractions (``reasoning_rl.data.generators.word_chain``) with GSM8K's
instruction (think step by step, final answer in ``\\boxed{}``); with ``--max-steps`` each problem has a number
of operations drawn log-uniformly from ``[steps, max-steps]``, so worked solutions are long-tailed (about 28
tokens per operation: 2..48 operations give p50 ~316 tokens and ~14 % over a 1,024-token cap).

Why this task: SmolLM2-135M-Instruct, the real model we have offline, earns ~0.01-0.03 on GSM8K and on these
problems as it is (bench/RESULTS.md), so almost every group has equal rewards and an update has nothing to learn.
After a short SFT on worked solutions of *other* problems of the same kind (``--sft``: prompt/response rows,
seed ``--seed + 1``, for ``rrl sft``; bench/gpu/warm_sft.yaml) it solves a part of them at temperature 1: the
longer the chain, the likelier a slip, and the longest do not fit the cap.
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
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--max-operand", type=int, default=20)
    ap.add_argument("--sft", type=Path, default=None, help="also write SFT rows (prompt + worked solution) here")
    ap.add_argument("--sft-size", type=int, default=4000)
    args = ap.parse_args()
    shape = {"steps": args.steps, "max_steps": args.max_steps, "max_operand": args.max_operand}
    rows = word_chain(args.size, args.seed, **shape)
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
    if args.sft is not None:
        sft = word_chain(args.sft_size, args.seed + 1, **shape)  # other problems than the RL rows'
        with args.sft.open("w", encoding="utf-8") as fh:
            for row in sft:
                prompt = [{"role": "user", "content": row["question"] + SUFFIX}]
                fh.write(json.dumps({"prompt": prompt, "response": row["solution"]}) + "\n")
        print(f"wrote {len(sft)} SFT rows to {args.sft}")


if __name__ == "__main__":
    main()
