"""Reading what the benchmarked systems print: verl's console metrics, TRL's RESULT line, and the table."""

from __future__ import annotations

import json
import re
import statistics
from typing import Any

TOKENS_PER_STEP = 32 * 8 * (128 + 256)  # nominal, as side_by_side.py counts for ours and TRL
GEN_TOKENS_PER_STEP = 32 * 8 * 256


STEP_LINE = re.compile(r"^\[\s*([\d.]+)\].*?(?:\s|\))step:(\d+) - (.*)$")  # run_logged's [seconds] prefix
KEEP = (
    "timing_s/step",
    "timing_s/gen",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/update_weights",
    "perf/throughput",
    "perf/mfu/actor",
    "actor/perf/max_memory_allocated_gb",
    "actor/perf/max_memory_reserved_gb",
    "perf/total_num_tokens",
    "response_length/mean",
    "prompt_length/mean",
    "critic/score/mean",
    "actor/pg_loss",
)


def _number(text: str) -> float | None:
    text = text.strip()
    if text.endswith(")") and "(" in text:  # numpy scalars print as np.float64(1.5)
        text = text[text.index("(") + 1 : -1]
    try:
        return float(text)
    except ValueError:
        return None


def parse_steps(log_text: str) -> list[dict[str, float]]:
    """verl's console logger prints one ``step:N - key:value - ...`` line per step."""
    steps = []
    for line in log_text.splitlines():
        m = STEP_LINE.search(line)
        if not m:
            continue
        row: dict[str, float] = {"t": float(m.group(1)), "step": float(m.group(2))}
        for item in m.group(3).split(" - "):
            key, _, value = item.partition(":")
            num = _number(value)
            if key.strip() in KEEP and num is not None:
                row[key.strip()] = num
        steps.append(row)
    return steps


def summarize(rows: list[dict[str, float]]) -> dict[str, Any]:
    """Medians over steps 2..N (step 1 carries compilation and first-touch costs), as for ours and TRL."""
    warm = [r for r in rows if r["step"] >= 2] or rows
    med = {
        k: round(statistics.median([r[k] for r in warm if k in r]), 3)
        for k in KEEP
        if any(k in r for r in warm)
    }
    out: dict[str, Any] = {
        "steps_parsed": len(rows),
        "medians": med,
        "step_s": [r.get("timing_s/step") for r in rows],
        "first_step_logged_at_s": rows[0]["t"] if rows else None,
    }
    gaps = [
        b["t"] - a["t"] for a, b in zip(rows, rows[1:], strict=False) if b["step"] >= 3
    ]  # log line to log line
    if gaps:
        out["step_wall_s_median"] = round(statistics.median(gaps), 3)
    if "timing_s/step" in med:
        out["step_s_median"] = med["timing_s/step"]
        out["tokens_per_s"] = round(TOKENS_PER_STEP / med["timing_s/step"])
    if "timing_s/gen" in med:
        out["gen_tokens_per_s"] = round(GEN_TOKENS_PER_STEP / med["timing_s/gen"])
    return out


def first_error(log_text: str) -> str | None:
    lines = log_text.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"(Error|Exception)\b.*:", line) and "Warning" not in line:
            return " | ".join(x.strip() for x in lines[i : i + 3])[:600]
    return None


def trl_result(log_text: str) -> dict[str, Any]:
    """TRL's bench prints one ``RESULT {json}`` line; run_logged prefixes every line with ``[seconds]``."""
    for line in log_text.splitlines():
        m = re.match(r"^\[\s*[\d.]+\] RESULT (.*)$", line)
        if m:
            return dict(json.loads(m.group(1)))
    return {"system": "trl", "error": log_text[-1500:]}


def table(r: dict[str, Any]) -> str:
    o, t, v = r["ours"], r["trl"], r["verl"]
    vm = v.get("medians", {})
    rows = [
        (
            "step time (median, steps 2-5)",
            o.get("step_s_median"),
            t.get("step_s_median"),
            v.get("step_s_median"),
        ),
        (
            "tokens/s/GPU (32x8x(128+256) nominal)",
            o.get("tokens_per_s"),
            t.get("tokens_per_s"),
            v.get("tokens_per_s"),
        ),
        ("generation s", o.get("generate_s"), None, vm.get("timing_s/gen")),
        ("generation tokens/s", o.get("gen_tokens_per_s"), None, v.get("gen_tokens_per_s")),
        ("old log-prob s", None, None, vm.get("timing_s/old_log_prob")),
        ("update s", o.get("update_s"), None, vm.get("timing_s/update_actor")),
        ("update MFU", o.get("update_mfu"), None, vm.get("perf/mfu/actor")),
        ("hand-off s", o.get("handoff_s"), None, vm.get("timing_s/update_weights")),
        ("GPU peak GiB (nvidia-smi)", o.get("gpu_peak_gib"), t.get("gpu_peak_gib"), v.get("gpu_peak_gib")),
        (
            "trainer allocator peak GiB",
            o.get("peak_mem_gib"),
            t.get("peak_mem_gib"),
            vm.get("actor/perf/max_memory_allocated_gb"),
        ),
        ("wall s (incl. start)", o.get("wall_s"), t.get("wall_s"), v.get("wall_s")),
    ]
    lines = [f"| | ours | TRL 1.16 | verl 0.9.1 ({v.get('setting')}) |", "|---|---|---|---|"]
    lines += [f"| {name} | {a} | {b} | {c} |" for name, a, b, c in rows]
    lines.append(
        f"ratio ours/verl tokens/s: {r.get('ratio_ours_over_verl')}   ours/TRL: {r.get('ratio_ours_over_trl')}"
    )
    for s in r.get("sweep", []) + [
        dict(x, setting=f"{x['setting']} (this call)") for x in r.get("verl_runs", [])
    ]:
        lines.append(
            f"verl {s.get('setting')}: step {s.get('step_s_median')} s, {s.get('tokens_per_s')} tok/s, "
            f"complete={s.get('complete')} {s.get('skipped') or s.get('error') or ''}"[:300]
        )
    return "\n".join(lines)
