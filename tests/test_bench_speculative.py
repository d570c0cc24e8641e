"""bench/gpu/speculative.py (issue 46): the variant names, the acceptance figures and the comparison with off.

The whole script is exercised by its CPU dry run (``python bench/gpu/speculative.py --dry-run --out X.json``:
three vLLM engines, 77-107 s on two cores, so not part of the suite; docs/speculative.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))

import speculative  # noqa: E402


def test_variants_name_a_method_a_tail_or_off_without_async_scheduling():
    assert speculative.parse_variant("off") == ("off", 0, False)
    assert speculative.parse_variant("off:sync") == ("off", 0, True)
    assert speculative.parse_variant("ngram") == ("ngram", 0, False)
    assert speculative.parse_variant("group:tail64") == ("group", 64, False)
    for bad in ("ngram:sync", "off:tail64", "ngram:tail0", "ngram:64", "eagle"):
        with pytest.raises(ValueError):
            speculative.parse_variant(bad)


def test_acceptance_is_null_with_speculation_off_or_a_missing_count():
    rounds = [
        {"null_drafts": 0, "drafts": 10, "draft_tokens": 40, "accepted": 20},
        {"null_drafts": 0, "drafts": 30, "draft_tokens": 120, "accepted": 40},
    ]
    on = speculative.acceptance(rounds, 1000, True)
    assert (on["acceptance_rate"], on["accepted_per_draft"], on["steps_per_token"]) == (0.375, 1.5, 0.94)
    assert speculative.acceptance(rounds, 1000, False)["acceptance_rate"] is None
    missing = [{**rounds[0], "null_drafts": 1}, rounds[1]]
    assert speculative.acceptance(missing, 1000, True)["steps_per_token"] is None


def test_compare_takes_the_rounds_one_per_prompt_set_apart_from_the_whole_set():
    def run(name: str, steps: list[float], lengths: list[int], z: float) -> dict:
        exact = {
            "n_rounds": 4,
            "lengths": lengths,
            "rewards": [1.0] * len(lengths),
            "z_logprob": z,
            "z_eos": 0.0,
        }
        return {"name": name, "steps_s": steps, "exact": exact}

    off = run("spec:off", [6.0, 6.0], [1, 2, 3, 4, 50, 60], -3.0)
    tail = run("spec:ngram:tail64", [4.0, 5.0], [1, 2, 3, 4, 5, 6], -2.0)
    c = speculative.compare(off, tail)
    assert c["step_time_ratio"] == pytest.approx(6.0 / 4.5, abs=1e-3)
    assert c["ks_length_rounds"]["d"] == 0.0 and c["ks_length_rounds"]["n"] == 4
    assert c["ks_length"]["d"] == pytest.approx(1 / 3, abs=1e-3) and c["ks_length"]["n"] == 6
    assert c["z_logprob_vs_off"] == pytest.approx(1 / 2**0.5, abs=0.01)
