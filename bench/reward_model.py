"""Reward-model scoring throughput on the CPU (issue 48): the tiny random reward model
(``reasoning_rl.tiny.build_tiny_reward_model``: 2 layers, hidden 64, char tokenizer) scores 64 (prompt,
response) pairs (responses 40-400 characters) through ``RewardModelGrader.score`` at batch sizes 1, 8 and 32,
and through the grader's per-response ``grade`` (a batch of one, as the grading pool calls it). Median of 3
rounds after a warm-up; samples/s of wall time (the machine is shared: the load average is recorded).
Prints a table; writes bench/out/reward_model.json.

    .venv/bin/python bench/reward_model.py
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from graders.types import GradeContext
from reasoning_rl.model_graders import RewardModelGrader
from reasoning_rl.tiny import build_tiny_reward_model

PAIRS = 64
ROUNDS = 3
OUT = Path(__file__).parent / "out" / "reward_model.json"


def workload() -> tuple[list[list[dict[str, str]]], list[str]]:
    rng = random.Random(0)
    chats = [
        [{"role": "user", "content": f"What is {rng.randint(1, 99)} + {rng.randint(1, 99)}?"}]
        for _ in range(PAIRS)
    ]
    responses = [
        "".join(rng.choice("0123456789 +=abcdefx") for _ in range(rng.randint(40, 400))) for _ in range(PAIRS)
    ]
    return chats, responses


def rate(fn: Any) -> float:
    fn()  # warm-up (model load, allocator)
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return PAIRS / statistics.median(times)


def main() -> None:
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    chats, responses = workload()
    grader = RewardModelGrader()
    results: dict[str, Any] = {
        "pairs": PAIRS,
        "load_avg_start": os.getloadavg()[0],
        "torch_threads": torch.get_num_threads(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = str(build_tiny_reward_model(Path(tmp) / "rm"))
        for batch in (1, 8, 32):
            results[f"score_batch_{batch}_per_s"] = rate(
                lambda b=batch: grader.score(chats, responses, path=path, batch_size=b)
            )
        contexts = [GradeContext(messages=tuple(c)) for c in chats]
        results["grade_per_s"] = rate(
            lambda: [
                grader.grade(r, None, context=c, path=path) for c, r in zip(contexts, responses, strict=True)
            ]
        )
    results["load_avg_end"] = os.getloadavg()[0]
    print(f"{'path':<24}{'samples/s':>12}")
    for key, value in results.items():
        if key.endswith("_per_s"):
            print(f"{key:<24}{value:>12.1f}")
    print(f"load average {results['load_avg_start']:.1f} -> {results['load_avg_end']:.1f}")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
