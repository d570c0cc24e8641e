"""pass@k, maj@k and answer equivalence classes; pure functions shared by ``rrl grade`` and evaluations."""

from __future__ import annotations

import json
from collections import Counter
from math import comb

from graders.types import Grade

# Grade.details keys under which graders report the answer they extracted (first present wins).
ANSWER_DETAIL_KEYS = ("extracted", "extracted_answer", "answer", "pred", "prediction")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples with c correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def answer_key(grade: Grade, response: str) -> str | None:
    """The equivalence class a response votes for: the grader's extracted answer, else the stripped text."""
    for key in ANSWER_DETAIL_KEYS:
        value = grade.details.get(key)
        if isinstance(value, list | tuple) and len(value) == 1:
            value = value[0]  # the math grader lists the answers it extracted; one answer is the usual case
        if value is not None and value != "" and value != []:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)
    if any(k in grade.details for k in ANSWER_DETAIL_KEYS):
        return None  # the grader looked and found no answer: it does not vote
    return response.strip() or None


def majority_correct(keys: list[str | None], correct: list[bool]) -> tuple[bool | None, str | None]:
    """maj@k for one row: is the most common answer (ties: the one seen first) judged correct?

    Responses without an answer (errors, nothing extracted) do not vote; None if nobody voted.
    """
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return None, None
    best = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == best)
    return any(c for k, c in zip(keys, correct, strict=True) if k == winner), winner
