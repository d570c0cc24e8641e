"""Recompute the ratios of GPU results recorded before ``throughput.py`` (issue 42) by Σtokens/Σtime.

    python bench/gpu/recompute_legacy.py [bench/gpu/results]

Before 2026-12-04 the benches reported a side's tokens/s as a median (of per-step rates for the realistic
workload, of step times for the fixed-length anchor) and took ratios of those. This reads the raw per-step values
those files kept and prints, per file, the recorded ratio beside Σtokens/Σtime over the same measured steps
(TRL's and verl's first step is warm-up, as the benches dropped it; ours' files hold only measured steps).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402


def _anchor_tokens(doc: dict[str, Any]) -> float:
    trl = doc.get("trl", {})
    return float(
        trl.get("prompts", 32)
        * trl.get("G", 8)
        * (trl.get("prompt_len", 128) + trl.get("completion_len", 256))
    )


def runs_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``throughput`` run records from a legacy pair file (sbs_*, real_pair_*, verl_*)."""
    runs: list[dict[str, Any]] = []
    ours, trl = doc.get("ours", {}), doc.get("trl", {})
    real = "real_tokens_median" in ours
    if ours.get("steps"):
        steps = [float(s["step_s"] if isinstance(s, dict) else s) for s in ours["steps"]]
        if real:
            tokens = [float(s["real_tokens"]) for s in ours["steps"]]
        else:
            tokens = [_anchor_tokens(doc)] * len(steps)
        runs.append({"name": "ours", "steps_s": steps, "tokens": tokens})
    if trl.get("steps") and "error" not in trl:
        steps = [float(s) for s in trl["steps"][1:]]
        if real:
            tokens = [float(t) for t in trl["real_tokens"][1 : len(trl["steps"])]]
        else:
            tokens = [_anchor_tokens(doc)] * len(steps)
        runs.append({"name": "trl", "steps_s": steps[: len(tokens)], "tokens": tokens})
    verl = doc.get("verl", {})
    if verl.get("step_s"):  # verl's parsed step times, first one (warm-up) dropped as its median did
        steps = [float(s) for s in verl["step_s"][1:]]
        runs.append({"name": "verl", "steps_s": steps, "tokens": [_anchor_tokens(doc)] * len(steps)})
    return runs


def recorded(doc: dict[str, Any]) -> dict[str, float]:
    """The ratios the file itself recorded (median-based)."""
    out: dict[str, float] = {}
    if "ratio_tokens_per_s" in doc:
        out["ours / trl"] = float(doc["ratio_tokens_per_s"])
    tps = {
        k: doc[k]["tokens_per_s"]
        for k in ("ours", "trl", "verl")
        if isinstance(doc.get(k), dict) and "tokens_per_s" in doc[k]
    }
    for a in tps:
        for b in tps:
            if a != b:
                out.setdefault(f"{a} / {b}", round(tps[a] / tps[b], 3))
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent / "results")
    for path in sorted(root.glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or "workload" in doc and isinstance(doc["workload"], dict):
            continue  # already in the new format (throughput.py recomputes it directly)
        runs = runs_of(doc)
        if len(runs) < 2:
            continue
        now = throughput.summarise(runs)["ratios"]
        old = recorded(doc)
        for key in sorted(k for k in now if k.startswith("ours /")):
            print(f"{path.name:<28} {key:<12} recorded {old.get(key, '-'):>6}  Σtokens/Σtime {now[key]:>6}")


if __name__ == "__main__":
    main()
