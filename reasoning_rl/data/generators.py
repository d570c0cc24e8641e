"""Seeded task generators: verifiable problems the project makes itself (demo, tests, CI, no downloads)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Gus", "Hana", "Ivo", "Jun")
_THINGS = ("apples", "books", "coins", "marbles", "pens", "stamps", "shells", "cards")


def _expression(rng: random.Random, max_operand: int, ops: str) -> tuple[str, int]:
    op = rng.choice(ops)
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    if op == "-" and b > a:
        a, b = b, a
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    return f"{a} {op} {b}", value


def _word_problem(rng: random.Random, max_operand: int) -> tuple[str, int]:
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    a, b = rng.randint(1, max_operand), rng.randint(1, max_operand)
    if rng.random() < 0.5:
        return f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?", a + b
    a, b = max(a, b), min(a, b)
    return f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", a - b


def arithmetic(
    size: int, seed: int, *, max_operand: int = 9, ops: str = "+-", word_problems: float = 0.0
) -> list[dict[str, Any]]:
    """Small arithmetic and word problems in the simple schema (``question`` + ``answer``)."""
    if not ops or set(ops) - set("+-*"):
        raise ValueError(f"ops must be made of '+', '-', '*', got {ops!r}")
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        if rng.random() < word_problems:
            question, value = _word_problem(rng, max_operand)
        else:
            expr, value = _expression(rng, max_operand, ops)
            question = f"What is {expr}?"
        rows.append(
            {
                "id": f"arith-{seed}-{i}",
                "question": question,
                "answer": str(value),
                "data_source": "arithmetic",
            }
        )
    return rows


def _chain(rng: random.Random, steps: int, max_operand: int) -> tuple[str, int, str]:
    """A story of ``steps`` operations, its answer, and a worked solution (one line per operation)."""
    name, thing = rng.choice(_NAMES), rng.choice(_THINGS)
    value = rng.randint(2, max_operand)
    parts = [f"{name} has {value} {thing}."]
    work = [f"{name} starts with {value} {thing}."]
    for i in range(1, steps + 1):
        if value < 2 or rng.random() < 0.5:
            b = rng.randint(1, max_operand)
            parts.append(rng.choice((f"Then {name} buys {b} more.", f"A friend gives {name} {b} more.")))
            line = f"Step {i}: {name} gets {b} more, so {value} + {b} = {value + b}."
            value += b
        else:
            b = rng.randint(1, value - 1)
            parts.append(rng.choice((f"Then {name} gives away {b}.", f"Then {name} loses {b}.")))
            line = f"Step {i}: {name} loses {b}, so {value} - {b} = {value - b}."
            value -= b
        work.append(f"{line} Now {name} has {value} {thing}.")
    parts.append(f"How many {thing} does {name} have now?")
    work.append(f"So {name} has {value} {thing} now. The answer is \\boxed{{{value}}}.")
    return " ".join(parts), value, "\n".join(work)


def word_chain(
    size: int, seed: int, *, steps: int = 2, max_operand: int = 20, max_steps: int | None = None
) -> list[dict[str, Any]]:
    """Word problems of chained additions/subtractions, each with its worked solution (``solution``: one line per
    operation, the answer in ``\\boxed{}``). ``steps`` operations each, or with ``max_steps`` a number drawn
    log-uniformly from ``[steps, max_steps]``: the chain-of-thought lengths of a model that works like the
    solutions are then long-tailed (the GPU benches' learning workload, datasets/recipes/word_chain.py)."""
    if steps < 1 or max_operand < 2 or (max_steps is not None and max_steps < steps):
        raise ValueError(
            f"word_chain needs 1 <= steps <= max_steps and max_operand >= 2, got {steps}, {max_steps}, {max_operand}"
        )
    rng = random.Random(seed)
    rows = []
    for i in range(size):
        k = (
            steps
            if max_steps is None
            else int(math.exp(rng.uniform(math.log(steps), math.log(max_steps + 1))))
        )
        question, value, solution = _chain(rng, min(k, max_steps or steps), max_operand)
        rows.append(
            {
                "id": f"chain-{seed}-{i}",
                "question": question,
                "answer": str(value),
                "solution": solution,
                "data_source": "word_chain",
            }
        )
    return rows


def fixed_digit(size: int, seed: int, *, digit: str = "7") -> list[dict[str, Any]]:
    """A trivially learnable task (the learning test): whatever the prompt, the answer is always ``digit``."""
    rng = random.Random(seed)
    return [
        {
            "id": f"digit-{seed}-{i}",
            "question": f"Say {rng.randint(0, 99)}",
            "answer": digit,
            "data_source": "fixed_digit",
        }
        for i in range(size)
    ]


GENERATORS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "arithmetic": arithmetic,
    "fixed_digit": fixed_digit,
    "word_chain": word_chain,
}
