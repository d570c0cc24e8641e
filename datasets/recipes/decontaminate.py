"""Drop evaluation rows whose question is a near-copy of any training question (templated variants included).

    python datasets/recipes/decontaminate.py TRAIN.jsonl EVAL.jsonl OUT.jsonl [--threshold 0.3] [--report FILE]

Why: templated training sets such as reasoning-gym's ``gsm_symbolic`` were built from GSM8K *test* questions
(names and numbers swapped), so exact n-gram checks miss them. Each question becomes its set of lower-cased
words with digits and words of fewer than 3 letters removed; an eval row is dropped when its Jaccard similarity
with some training question reaches ``--threshold``. Rows are read as JSON objects with a ``question`` field
(or a verl-style ``prompt`` list, whose last message is used). ``--report`` writes the dropped rows with their
closest training question, for a look by eye. Calibration (GSM8K test vs 4,000 ``gsm_symbolic`` rows, seed 1):
87 test questions score >= 0.3, each the source of a template; the closest pair below 0.3 (0.296) is a
different problem.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

WORD = re.compile(r"[a-z][a-z']{2,}")


def question_of(row: dict[str, Any], where: str) -> str:
    if isinstance(row.get("question"), str):
        return str(row["question"])
    prompt = row.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return str(prompt[-1].get("content", ""))
    raise ValueError(f"{where}: no 'question' string or 'prompt' message list")


def words(text: str) -> frozenset[str]:
    return frozenset(WORD.findall(text.lower()))


def read_rows(path: Path) -> list[tuple[dict[str, Any], str]]:
    """Every row of a JSON-lines file with its question; a malformed line is an error naming file:line."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object")
            rows.append((row, question_of(row, f"{path}:{n}")))
    return rows


def closest(query: frozenset[str], train: list[frozenset[str]], index: dict[str, list[int]]) -> tuple[float, int]:
    """Best Jaccard similarity of ``query`` against the training sets sharing at least one word with it."""
    best, best_i = 0.0, -1
    for i in {i for w in query for i in index.get(w, ())}:
        other = train[i]
        sim = len(query & other) / len(query | other)
        if sim > best:
            best, best_i = sim, i
    return best, best_i


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("train", type=Path)
    ap.add_argument("eval", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--report", type=Path)
    args = ap.parse_args()
    try:
        train_rows, eval_rows = read_rows(args.train), read_rows(args.eval)
    except (OSError, ValueError) as err:
        sys.exit(f"error: {err}")
    train_texts = sorted({q for _, q in train_rows})
    train = [words(t) for t in train_texts]
    # Common words would make every pair a candidate; index only words in < 5 % of training questions.
    df: dict[str, int] = defaultdict(int)
    for s in train:
        for w in s:
            df[w] += 1
    index: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(train):
        for w in s:
            if df[w] < max(2, len(train) // 20):
                index[w].append(i)
    kept, dropped = [], []
    for row, question in eval_rows:
        sim, i = closest(words(question), train, index)
        (dropped if sim >= args.threshold else kept).append((row, question, sim, i))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row, _, _, _ in kept:
            fh.write(json.dumps(row) + "\n")
    if args.report:
        with args.report.open("w", encoding="utf-8") as fh:
            for _, question, sim, i in sorted(dropped, key=lambda d: -d[2]):
                fh.write(json.dumps({"similarity": round(sim, 3), "eval": question,
                                     "train": train_texts[i]}) + "\n")
    print(f"kept {len(kept)} of {len(eval_rows)} rows of {args.eval} (dropped {len(dropped)} with Jaccard >= "
          f"{args.threshold} to a question of {args.train}) -> {args.out}")


if __name__ == "__main__":
    main()
