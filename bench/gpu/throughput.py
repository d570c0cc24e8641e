"""Throughput figures that cannot misreport: the one definition every GPU bench uses.

    python bench/gpu/throughput.py RESULT.json [RESULT.json ...]     # recompute the table from the raw runs

A bench result is ``{"workload": {...}, "runs": [{"name", "steps_s", "tokens", ...}, ...]}``: every measured
step's wall time and its tokens (prompt + response; ``gen_tokens``: generated only). A side's throughput is
Σtokens / Σtime over all its measured steps (runs of the same name pooled), and a ratio between two sides is the
ratio of those. Never a median of per-step rates: when steps alternate (1.7 s with few tokens, 33 s with many)
the median rate says nothing about how long the work took, and can even flip the sign of a comparison. Medians
and spreads of step times are reported beside, as what they are.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

REQUIRED_RUN_KEYS = ("name", "steps_s", "tokens")


def check_run(run: dict[str, Any]) -> None:
    """A run record a reader can recompute: a name, and one token count per measured step."""
    missing = [k for k in REQUIRED_RUN_KEYS if k not in run]
    if missing:
        raise ValueError(f"run {run.get('name', '?')!r}: missing {', '.join(missing)}")
    steps, tokens = run["steps_s"], run["tokens"]
    if len(steps) != len(tokens):
        raise ValueError(f"run {run['name']!r}: {len(steps)} steps_s but {len(tokens)} tokens")
    if any(not (s > 0) for s in steps):
        raise ValueError(f"run {run['name']!r}: a step time is not > 0: {steps}")
    gen = run.get("gen_tokens")
    if gen is not None and len(gen) != len(steps):
        raise ValueError(f"run {run['name']!r}: {len(steps)} steps_s but {len(gen)} gen_tokens")


def rate(tokens: Sequence[float], seconds: Sequence[float]) -> float:
    """Σtokens / Σseconds: the throughput of the steps taken together."""
    total = float(sum(seconds))
    if total <= 0:
        raise ValueError("no measured time")
    return float(sum(tokens)) / total


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min, max and quartiles of step times (a description of the steps, not a throughput)."""
    if not values:
        return {"n": 0}
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else [values[0]] * 3
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "q1": round(q[0], 3),
        "q3": round(q[2], 3),
    }


def pooled(runs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per name: all measured steps of the runs of that name, in order (interleaved repeats pooled).
    ``gen_tokens`` is None for a side where any run lacks it (a partial sum would mislead)."""
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        check_run(run)
        side = out.setdefault(run["name"], {"steps_s": [], "tokens": [], "gen_tokens": []})
        side["steps_s"] += [float(s) for s in run["steps_s"]]
        side["tokens"] += [float(t) for t in run["tokens"]]
        gen = run.get("gen_tokens")
        side["gen_tokens"] = None if gen is None or side["gen_tokens"] is None else side["gen_tokens"] + gen
    return out


def side_summary(side: dict[str, Any]) -> dict[str, Any]:
    """Σtokens/Σtime (all and generated-only), total tokens and time, and the spread of step times."""
    out: dict[str, Any] = {
        "tokens_per_s": round(rate(side["tokens"], side["steps_s"])),
        "tokens": round(sum(side["tokens"])),
        "seconds": round(sum(side["steps_s"]), 3),
        "step_s": spread(side["steps_s"]),
    }
    if side.get("gen_tokens"):
        out["gen_tokens_per_s"] = round(rate(side["gen_tokens"], side["steps_s"]))
    return out


def summarise(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each side's summary and every pairwise ratio of Σtokens/Σtime (``"a / b"``: a is that many times b)."""
    by_name = pooled(runs)
    sides = {name: side_summary(side) for name, side in by_name.items()}
    rates = {name: rate(s["tokens"], s["steps_s"]) for name, s in by_name.items()}
    ratios = {f"{a} / {b}": round(rates[a] / rates[b], 3) for a in rates for b in rates if a != b}
    return {"sides": sides, "ratios": ratios}


def result(workload: dict[str, Any], runs: Sequence[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The JSON a GPU bench writes: what ran (``workload``), the raw ``runs``, and the summary derived from them."""
    if not workload:
        raise ValueError("a result names its workload (model shape, lengths, batch)")
    return {"workload": workload, "runs": list(runs), **extra, **summarise(runs)}


def table(summary: dict[str, Any]) -> str:
    """Sides and ratios as text: Σtokens/Σtime first, step-time spread beside it."""
    lines = ["side                 steps  tokens/s  gen tok/s   Σtokens    Σs   median    min    max"]
    for name, s in summary["sides"].items():
        st = s["step_s"]
        lines.append(
            f"{name:<20} {st['n']:>5} {s['tokens_per_s']:>9} {s.get('gen_tokens_per_s', '-'):>10}"
            f" {s['tokens']:>9} {s['seconds']:>6.1f} {st['median']:>7} {st['min']:>6} {st['max']:>6}"
        )
    lines += [f"ratio {k} (Σtokens/Σtime): {v}x" for k, v in summary["ratios"].items()]
    return "\n".join(lines)


def main() -> None:
    for path in sys.argv[1:]:
        doc = json.loads(Path(path).read_text())
        print(f"{path}: workload {json.dumps(doc['workload'])}")
        print(table(summarise(doc["runs"])))


if __name__ == "__main__":
    main()
