"""pass@k, maj@k and answer equivalence: the one implementation behind ``rrl grade`` and ``rrl eval``.

maj@k votes by the grader's own equivalence, not by string: when two responses extracted different answers
(``0.5`` and ``\\frac12``), the grader judges one response against the other's answer as ground truth
(``equivalence_checks`` lists those judgements, ``score_row`` merges the answers it found equal). Only
answers a grader extracted (a single value under one of ``ANSWER_DETAIL_KEYS``) are compared this way: a
grader that reports no extracted answer votes by the stripped response text, compared as strings.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from math import comb

from graders.types import Grade

# Grade.details keys under which graders report the answer they extracted (first present wins).
ANSWER_DETAIL_KEYS = ("extracted", "extracted_answer", "answer", "pred", "prediction")
# Distinct extracted answers of one row that are compared with each other (the most voted first); the pairs
# grow quadratically, and beyond this many distinct answers a row has no meaningful majority anyway.
MAX_COMPARED_ANSWERS = 16


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples with c correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


@dataclass(frozen=True)
class AnswerKey:
    """What a response votes for. ``comparable``: a single answer the grader extracted, so the grader can
    judge another response against it (an answer used as ground truth)."""

    text: str
    comparable: bool


def answer_key(grade: Grade, response: str) -> AnswerKey | None:
    """The answer a response votes for: the grader's extracted answer, else the stripped text; None when it
    does not vote (an ``error`` grade, or the grader looked and found no answer)."""
    if grade.verdict == "error":
        return None
    for key in ANSWER_DETAIL_KEYS:
        value = grade.details.get(key)
        if isinstance(value, list | tuple) and len(value) == 1:
            value = value[0]  # the math grader lists the answers it extracted; one answer is the usual case
        if value is not None and value != "" and value != []:
            if isinstance(value, str):
                return AnswerKey(value, True)
            return AnswerKey(json.dumps(value, sort_keys=True, default=repr), False)
    if any(k in grade.details for k in ANSWER_DETAIL_KEYS):
        return None
    text = response.strip()
    return AnswerKey(text, False) if text else None


def answer_keys(grades: Sequence[Grade], responses: Sequence[str]) -> list[AnswerKey | None]:
    return [answer_key(g, r) for g, r in zip(grades, responses, strict=True)]


def equivalence_checks(keys: Sequence[AnswerKey | None]) -> list[tuple[int, str]]:
    """Judgements that decide which extracted answers are the same: (response index, answer used as ground
    truth). The response is the first one that voted for its answer; each unordered pair of distinct
    comparable answers is checked once."""
    first: dict[str, int] = {}
    votes: Counter[str] = Counter()
    for i, key in enumerate(keys):
        if key is not None and key.comparable:
            first.setdefault(key.text, i)
            votes[key.text] += 1
    ranked = sorted(first, key=lambda text: (-votes[text], first[text]))[:MAX_COMPARED_ANSWERS]
    ranked.sort(key=lambda text: first[text])
    return [(first[b], a) for n, a in enumerate(ranked) for b in ranked[n + 1 :]]


@dataclass(frozen=True)
class RowScore:
    """One row (prompt) scored from its k grades. ``maj`` is None when no response voted and none was judged."""

    k: int
    n_correct: int
    n_error: int
    maj: bool | None
    majority_answer: str | None

    @property
    def passed(self) -> bool:
        return self.n_correct > 0


def score_row(
    grades: Sequence[Grade],
    responses: Sequence[str],
    checks: Sequence[tuple[int, str]] = (),
    check_grades: Sequence[Grade] = (),
) -> RowScore:
    """Score a row; ``check_grades`` are the grader's verdicts on ``equivalence_checks(...)`` (same order)."""
    keys = answer_keys(grades, responses)
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        while parent.get(text, text) != text:
            text = parent[text]
        return text

    for (index, answer), grade in zip(checks, check_grades, strict=True):
        key = keys[index]
        if grade.verdict == "correct" and key is not None:
            a, b = root(answer), root(key.text)
            if a != b:
                parent[b] = a  # the earlier answer (the ground truth of the check) names the class
    classes = [root(k.text) if k is not None else None for k in keys]
    votes = Counter(c for c in classes if c is not None)
    n_error = sum(g.verdict == "error" for g in grades)
    maj: bool | None
    if votes:
        best = max(votes.values())
        winner: str | None = next(c for c in classes if c is not None and votes[c] == best)
        maj = any(g.verdict == "correct" for g, c in zip(grades, classes, strict=True) if c == winner)
    else:
        winner = None
        # judged responses, none with an answer: the majority answer is "no answer", which is wrong
        maj = False if n_error < len(grades) else None
    return RowScore(len(grades), sum(g.verdict == "correct" for g in grades), n_error, maj, winner)
