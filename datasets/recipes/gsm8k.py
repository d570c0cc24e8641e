"""Convert GSM8K (hub ``openai/gsm8k``, or a local JSONL with ``question``/``answer``) to our verl-style schema.

    python datasets/recipes/gsm8k.py OUT.jsonl [--source openai/gsm8k] [--split train]

The gold answer is the number after ``####``; the prompt asks for a ``\\boxed{}`` final answer.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SUFFIX = " Think step by step and put the final answer in \\boxed{}."


def gold(answer: str) -> str:
    if "####" not in answer:
        raise ValueError(f"GSM8K answer without '####': {answer[:80]!r}")
    return answer.split("####")[-1].strip().replace(",", "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--source", default="openai/gsm8k", help="hub name or local .jsonl")
    ap.add_argument("--split", default="train")
    args = ap.parse_args()
    if args.source.endswith(".jsonl"):
        rows = [json.loads(line) for line in Path(args.source).read_text().splitlines() if line.strip()]
    else:
        from datasets import load_dataset

        rows = list(load_dataset(args.source, "main", split=args.split))
    with open(args.out, "w", encoding="utf-8") as fh:
        for i, row in enumerate(rows):
            fh.write(json.dumps({
                "data_source": "gsm8k", "ability": "math",
                "prompt": [{"role": "user", "content": row["question"] + SUFFIX}],
                "reward_model": {"style": "rule", "ground_truth": gold(row["answer"])},
                "extra_info": {"index": i, "split": args.split},
            }) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
