"""Issue 35: the fixed-length anchor, ours and TRL 1.16 interleaved in ONE call, so run-to-run noise cannot decide it.

    python bench/gpu/interleave.py --trl-bench trl_bench.py --trl-phases trl_phases.py \
        --schedule ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours --steps 5 --budget 560 --out OUT.json

Each schedule entry is one fresh process (the GPU is freed when it exits), run in the given order:

- ``ours`` (or ``ours:NAME`` for a preset of ``OURS_PRESETS``): ``side_by_side.py qwen --only-ours``, our
  ``Trainer`` as ``rrl train`` runs it on the anchor (32 prompts x 8, 128 + 256 fixed-length tokens);
- ``trl:def:MB`` / ``trl:off:MB``: TRL's unchanged bench (``../shared/gpu/trl_bench.py``) under ``trl_phases.py``,
  at micro-batch MB sequences, with TRL's defaults (``def``: ``vllm_importance_sampling_correction`` on, an extra
  no-grad forward over the batch each step) or with the same work as ours (``off``: that correction off);
  ``trl:off:best`` takes whichever of ``off:32`` / ``off:64`` has the lower median step so far in this call.

Every run does ``--steps`` + 1 steps and its first is dropped (warm-up). A run starts only while its expected wall
time (the last run of its kind in this call, or ``FIRST_WALL_S``) fits the ``--budget`` left; skipped runs are
listed. Per side: every measured step, the median of all of them, the spread (min, max, and the
interquartile range), the median of run medians; ratios are ours' median tokens/s over each TRL setting's. Both
sides count the nominal 32 x 8 x (128 + 256) tokens per step, so a tokens/s ratio is the inverse step-time ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PROMPTS, GENS, PROMPT_LEN = int(os.environ.get("SBS_PROMPTS", 32)), 8, 128
COMPLETION_LEN = int(os.environ.get("SBS_COMPLETION_LEN", 256))
TOKENS = PROMPTS * GENS * (PROMPT_LEN + COMPLETION_LEN)
SHAPE = os.environ.get("SBS_SHAPE", "qwen")
FIRST_WALL_S = {"ours": 170.0, "trl": 140.0}  # 2026-12-01/02 runs: 149-164 s and 124-126 s, start included
# Our settings tried against the default (environment of side_by_side.py's child).
OURS_PRESETS: dict[str, dict[str, str]] = {
    "default": {},
    "async": {"OURS_ENGINE_ARGS": json.dumps({"async_scheduling": True})},
    "async_bt": {"OURS_ENGINE_ARGS": json.dumps({"async_scheduling": True, "max_num_batched_tokens": 65536})},
}


def parse_trl(text: str) -> dict[str, Any]:
    """TRL's per-step wall times (``STEP n s``), phase timers, effective settings and ``RESULT`` from its log."""
    out: dict[str, Any] = {"steps_all": [], "timers": []}
    for line in text.splitlines():
        if line.startswith("STEP "):
            out["steps_all"].append(float(line.split()[2].rstrip("s")))
        elif line.startswith("TIMERS "):
            out["timers"].append(json.loads(line[len("TIMERS ") :]))
        elif line.startswith("EFFECTIVE "):
            body = line[len("EFFECTIVE ") :]
            out["effective"] = json.loads(body[: body.rindex("}") + 1])
        elif line.startswith("RESULT "):
            out["result"] = json.loads(line[len("RESULT ") :])
    return out


def run_trl(entry: str, mb: int, over: dict[str, Any], args: argparse.Namespace, log: Path) -> dict[str, Any]:
    env = dict(os.environ, MICRO=str(mb), TRL_OVERRIDES=json.dumps(over))
    cmd = [sys.executable, args.trl_phases, args.trl_bench, SHAPE, str(PROMPTS), str(GENS)]
    cmd += [str(PROMPT_LEN), str(COMPLETION_LEN), str(args.steps + 1)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        text = (raw.decode() if isinstance(raw, bytes) else raw) + "\nTIMEOUT"
    log.write_text(text)
    got = parse_trl(text)
    rec: dict[str, Any] = {"entry": entry, "side": "trl", "micro": mb, "overrides": over, **got}
    rec["steps"] = got["steps_all"][1:]
    if "result" not in got:
        rec["error"] = text[-2000:]
    return rec


def run_ours(entry: str, preset: str, args: argparse.Namespace, index: int, log: Path) -> dict[str, Any]:
    child = Path(args.work) / f"ours_{index}.json"
    env = dict(os.environ, **OURS_PRESETS[preset])
    cmd = [sys.executable, str(HERE / "side_by_side.py"), SHAPE, "--steps", str(args.steps), "--only-ours"]
    cmd += ["--out", str(child)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        text = (raw.decode() if isinstance(raw, bytes) else raw) + "\nTIMEOUT"
    log.write_text(text)
    rec: dict[str, Any] = {"entry": entry, "side": "ours", "preset": preset, "env": OURS_PRESETS[preset]}
    if not child.exists():
        return {**rec, "steps": [], "error": text[-2000:]}
    got = json.loads(child.read_text())
    child.unlink()
    got.pop("all_metrics_last_step", None)
    return {**rec, **got, "steps": [s["step_s"] for s in got["steps"]]}


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min, max, interquartile range and the max/min ratio of a list of step times."""
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
        "max_over_min": round(max(values) / min(values), 2),
    }


def side_key(rec: dict[str, Any]) -> str:
    if rec["side"] == "ours":
        return f"ours:{rec['preset']}"
    mode = "off" if rec["overrides"] else "def"
    return f"trl:{mode}:{rec['micro']}"


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled steps per side, run medians, and ours' tokens/s over each TRL setting's (medians of all steps)."""
    sides: dict[str, dict[str, Any]] = {}
    for rec in runs:
        if not rec.get("steps"):
            continue
        s = sides.setdefault(side_key(rec), {"steps": [], "run_medians": []})
        s["steps"] += rec["steps"]
        s["run_medians"].append(round(statistics.median(rec["steps"]), 3))
    for s in sides.values():
        s.update(spread(s["steps"]))
        s["tokens_per_s"] = round(TOKENS / s["median"])
    ratios = {}
    for ours in (k for k in sides if k.startswith("ours")):
        for trl in (k for k in sides if k.startswith("trl")):
            ratios[f"{ours} / {trl}"] = round(sides[trl]["median"] / sides[ours]["median"], 2)
    offs = [k for k in sides if k.startswith("trl:off")]
    best = min(offs, key=lambda k: sides[k]["median"]) if offs else None
    return {"sides": sides, "ratios": ratios, "trl_best_matched": best}


def best_off(runs: list[dict[str, Any]]) -> int:
    meds = {
        r["micro"]: statistics.median(r["steps"])
        for r in runs
        if r["side"] == "trl" and r["overrides"] and r.get("steps")
    }
    return min(meds, key=lambda mb: meds[mb]) if meds else 32


def table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = ["run  entry              steps 2..N (s)                                 median  wall"]
    for i, r in enumerate(runs):
        steps = " ".join(f"{v:.2f}" for v in r.get("steps", []))
        med = f"{statistics.median(r['steps']):.3f}" if r.get("steps") else "  -  "
        err = "  ERROR" if r.get("error") else ""
        lines.append(f"{i:>3}  {side_key(r):<18} {steps:<46} {med:>6}  {r.get('wall_s', 0):>5}{err}")
    lines.append("side               n  median   min    q1     q3    max  max/min  tokens/s  run medians")
    for k, s in summary["sides"].items():
        lines.append(
            f"{k:<18} {s['n']:>2} {s['median']:>7} {s['min']:>6} {s['q1']:>6} {s['q3']:>6} {s['max']:>6}"
            f" {s['max_over_min']:>6} {s['tokens_per_s']:>9}  {s['run_medians']}"
        )
    for r in runs:
        if r["side"] == "ours" and r.get("steps"):
            spans = r.get("spans_s", {})
            lines.append(
                f"{side_key(r)} run phases (medians): generate {r.get('generate_s')} update {r.get('update_s')}"
                f" (MFU {r.get('update_mfu')}) handoff {r.get('handoff_s')}"
                f" check {spans.get('time/handoff_check_s', '-')} grade wait {r.get('grade_wait_s')}"
            )
    lines += [f"ratio {k}: {v}x" for k, v in summary["ratios"].items()]
    lines.append(f"TRL best matched setting (IS off) in this call: {summary['trl_best_matched']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trl-bench", default=None, help="path to trl_bench.py (TRL entries need it)")
    ap.add_argument("--trl-phases", default=None, help="path to trl_phases.py (TRL entries need it)")
    ap.add_argument("--schedule", default="ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run (one more runs first)")
    ap.add_argument("--budget", type=float, default=560.0, help="seconds of wall time for the whole schedule")
    ap.add_argument("--run-timeout", type=int, default=300)
    ap.add_argument("--work", default="/tmp/rrl_interleave")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    start = time.time()
    runs: list[dict[str, Any]] = []
    skipped: list[str] = []
    last_wall: dict[str, float] = {}
    for i, entry in enumerate(args.schedule.split(",")):
        parts = entry.split(":")
        kind = parts[0]
        if kind not in ("ours", "trl"):
            raise SystemExit(f"schedule entry {entry!r}: expected ours[:PRESET] or trl:def|off:MB|best")
        left = args.budget - (time.time() - start)
        if last_wall.get(kind, FIRST_WALL_S[kind]) > left:
            skipped.append(entry)
            continue
        t = time.time()
        log = Path(args.work) / f"run{i}.log"
        if kind == "ours":
            rec = run_ours(entry, parts[1] if len(parts) > 1 else "default", args, i, log)
        else:
            if len(parts) != 3 or parts[1] not in ("def", "off") or not (args.trl_bench and args.trl_phases):
                raise SystemExit(
                    f"schedule entry {entry!r}: trl:def|off:MB|best needs --trl-bench/--trl-phases"
                )
            mb = best_off(runs) if parts[2] == "best" else int(parts[2])
            over = {"vllm_importance_sampling_correction": False} if parts[1] == "off" else {}
            rec = run_trl(entry, mb, over, args, log)
        rec["wall_s"] = round(time.time() - t, 1)
        rec["log"] = str(log)
        last_wall[kind] = rec["wall_s"]
        runs.append(rec)
        print(f"RUN {i} {side_key(rec)} steps={rec.get('steps')} wall={rec['wall_s']}", flush=True)
        if rec.get("error"):
            print(f"RUN {i} ERROR tail: {rec['error'][-600:]}", flush=True)
    summary = summarise(runs)
    result = {
        "schedule": args.schedule,
        "skipped": skipped,
        "tokens_per_step": TOKENS,
        "runs": runs,
        **summary,
    }
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(table(runs, summary), flush=True)
    if skipped:
        print(f"skipped (budget): {skipped}", flush=True)


if __name__ == "__main__":
    main()
