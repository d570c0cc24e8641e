"""The grader a well-known ``data_source`` gets when nothing else names one (verl's names, see docs/verl.md).

verl picks its scoring function from ``data_source`` (``verl.utils.reward_score.default_compute_score``); the
same rows here get the grader that applies that set's answer format, so a verl parquet grades right with no
option. An explicit choice always wins: the row's ``grader``, ``data.grader_map`` / ``--source-grader``,
``--grader``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KNOWN_SOURCES: dict[str, str] = {
    # GSM8K: the final "#### <number>" (verl's strict gsm8k rule).
    "openai/gsm8k": "gsm8k",
    # MATH and competition sets: the final \boxed{} answer (the math grader's strict mode).
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "hendrycks/competition_math": "math",
    "EleutherAI/hendrycks_math": "math",
    "math_dapo": "math",
    "AI-MO/aimo-validation-aime": "math",
    "AI-MO/aimo-validation-amc": "math",
    "numina_aops_forum": "math",
    "numina_synthetic_math": "math",
    "numina_amc_aime": "math",
    "numina_synthetic_amc": "math",
    "numina_cn_k12": "math",
    "numina_olympiads": "math",
}


def known_source_grader(data_source: object) -> str | None:
    """The default grader for a well-known ``data_source`` (verl's ``aime*`` prefix too), else None."""
    if not isinstance(data_source, str):
        return None
    if data_source in KNOWN_SOURCES:
        return KNOWN_SOURCES[data_source]
    if data_source.startswith("aime"):
        return "math"
    return None


class RowGraderError(ValueError):
    """A data row's ``grader`` field that is not a registered grader's name (see ``row_grader``)."""


def row_grader(row: Mapping[str, Any], *, trusted: str) -> str | None:
    """The grader a data row names in its ``grader`` field; None when it names none (absent, null or "").

    The one rule for every reader of rows (``rrl grade``, ``--regrade``, training and eval data): a row is
    data, so it may name a registered grader but never make this process or a grading worker import a module.
    A ``module:attr`` spec is accepted only from ``trusted`` (the config keys or flags that may give one)."""
    own = row.get("grader")
    if own is None or own == "":
        return None
    if not isinstance(own, str) or ":" in own:
        raise RowGraderError(
            f"field `grader` must be a registered grader name (see `rrl graders list`), got {own!r:.200}; "
            f"module:attr specs are accepted from {trusted} only"
        )
    return own
