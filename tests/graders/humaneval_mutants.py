"""HumanEval responses for the code-grader tests and bench: canonical solutions and four kinds of mutants."""

from __future__ import annotations

from typing import Any

MUTANTS = ("return_none", "off_by_one", "raising", "wrong_type")

_PERTURB = """
def _perturb(v):
    if type(v) is bool:
        return not v
    if type(v) in (int, float):
        return v + 1
    if type(v) is str:
        return v + "x"
    if type(v) in (list, tuple):
        return type(v)(list(v)[:-1]) if v else type(v)([0])
    if type(v) is dict:
        return {**v, "extra": 1}
    return 0
"""


def ground_truth(problem: dict[str, Any]) -> dict[str, str]:
    return {"test": problem["test"], "entry_point": problem["entry_point"], "prompt": problem["prompt"]}


def canonical(problem: dict[str, Any]) -> str:
    return problem["prompt"] + problem["canonical_solution"]


def mutant(problem: dict[str, Any], kind: str) -> str:
    ep = problem["entry_point"]
    if kind == "return_none":
        return problem["prompt"] + "    return None\n"
    if kind == "raising":
        return problem["prompt"] + "    raise ValueError('mutant')\n"
    wrap = (
        "_perturb(_canonical(*args, **kwargs))" if kind == "off_by_one" else "[_canonical(*args, **kwargs)]"
    )
    if kind not in ("off_by_one", "wrong_type"):
        raise ValueError(f"unknown mutant kind {kind!r}")
    return (
        canonical(problem) + "\n" + _PERTURB + f"\n_canonical = {ep}\n\n"
        f"def {ep}(*args, **kwargs):\n    return {wrap}\n"
    )


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"
