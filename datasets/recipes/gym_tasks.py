"""Write a seeded reasoning-gym task (e.g. ``gsm_symbolic``: GSM8K-like templated word problems) as simple rows.

    python datasets/recipes/gym_tasks.py NAME OUT.jsonl [--size 2000] [--seed 0] [--option key=value ...]

Rows are ``{"id", "question", "answer", "data_source": "rg_<NAME>"}``, ready for ``data.train: {path: OUT.jsonl}``
(a ``prompt_template`` can add the answer-format instruction). Generating here and carrying the file keeps the
training machine free of the ``reasoning-gym`` dependency.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def parse_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--option takes key=value, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", help="reasoning-gym dataset name, e.g. gsm_symbolic, basic_arithmetic, chain_sum")
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--option", type=parse_option, action="append", default=[], help="dataset option key=value")
    args = ap.parse_args()
    import reasoning_gym  # not named like this file: a recipe called reasoning_gym.py would import itself
    from reasoning_gym.factory import DATASETS

    known = sorted(DATASETS)
    if args.name not in known:
        sys.exit(f"unknown reasoning-gym dataset {args.name!r}; known: {', '.join(known)}")
    data = reasoning_gym.create_dataset(args.name, size=args.size, seed=args.seed, **dict(args.option))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for i, entry in enumerate(data):
            fh.write(json.dumps({"id": f"rg-{args.name}-{args.seed}-{i}", "question": entry["question"],
                                 "answer": str(entry["answer"]), "data_source": f"rg_{args.name}"}) + "\n")
    print(f"wrote {args.size} rows to {args.out}")


if __name__ == "__main__":
    main()
