"""Issues 35 and 31: ours and TRL 1.16 interleaved in ONE call, so run-to-run noise cannot decide it.

    python bench/gpu/interleave.py --trl-bench trl_bench.py --trl-phases trl_phases.py \
        --schedule ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours --steps 5 --budget 560 --out OUT.json
    python bench/gpu/interleave.py --workload realistic --gguf FILE.gguf --data GSM8K.jsonl \
        --trl-bench trl_realistic.py --trl-phases trl_phases.py --schedule ours:lag1,ours:sync,trl:off:32 ...

``--workload anchor`` (default): the fixed-length anchor (``side_by_side.py``). ``--workload realistic``:
``realistic.py``'s workload (SmolLM2-135M-Instruct, GSM8K, 64 x 8, up to 1,024 tokens, EOS honoured); its ours
presets are ``sync`` (``rollout.max_lag=0``) and ``lagK`` (continuous rollouts, ``max_lag=K``, issue 31), and
tokens/s counts each step's real tokens (prompt + response), since steps differ in length.

Each schedule entry is one fresh process (the GPU is freed when it exits), run in the given order:

- ``ours`` (or ``ours:NAME`` for a preset of ``OURS_PRESETS``): ``side_by_side.py qwen --only-ours``, our
  ``Trainer`` as ``rrl train`` runs it on the anchor (32 prompts x 8, 128 + 256 fixed-length tokens);
- ``trl:def:MB`` / ``trl:off:MB``: TRL's unchanged bench (``../shared/gpu/trl_bench.py``) under ``trl_phases.py``,
  at micro-batch MB sequences, with TRL's defaults (``def``: ``vllm_importance_sampling_correction`` on, an extra
  no-grad forward over the batch each step) or with the same work as ours (``off``: that correction off);
  ``trl:off:best`` takes whichever of ``off:32`` / ``off:64`` has the lower median step so far in this call.

Every run does ``--steps`` + 1 steps (TRL: ``--trl-steps``, default the same) and its first is dropped (warm-up). A run starts only while its expected wall
time (the last run of its kind in this call, or ``FIRST_WALL_S``) fits the ``--budget`` left; skipped runs are
listed. Per side: every measured step, the median of all of them, the spread (min, max, and the
interquartile range), the median of run medians; ratios are ours' median tokens/s over each TRL setting's (per
step: the anchor's nominal 32 x 8 x (128 + 256) tokens, the realistic workload's real tokens, over the step time).
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
REAL_FIRST_WALL_S = {"ours": 160.0, "trl": 260.0}  # realistic: ~9 s/step ours, ~30 s/step TRL (issue 20)
REAL = dict(prompts=64, gens=8, max_tokens=1024)  # realistic.py's defaults (REAL_PROMPTS, REAL_GENS, ...)
# Our settings tried against the default (environment of side_by_side.py's child).
OURS_PRESETS: dict[str, dict[str, str]] = {
    "default": {},
    "async": {"OURS_ENGINE_ARGS": json.dumps({"async_scheduling": True})},
    "async_bt": {"OURS_ENGINE_ARGS": json.dumps({"async_scheduling": True, "max_num_batched_tokens": 65536})},
}
REAL_PRESETS: dict[str, dict[str, str]] = {
    "sync": {"REAL_MAX_LAG": "0"},
    **{f"lag{k}": {"REAL_MAX_LAG": str(k)} for k in (1, 2, 3)},
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
    steps = str((args.trl_steps or args.steps) + 1)
    if args.workload == "realistic":  # the model dir our runs converted from the GGUF (the same weights)
        model_dir = (Path(".cache") / "converted" / args.gguf.stem.lower().replace(".", "-")).resolve()
        cmd = [sys.executable, args.trl_phases, args.trl_bench, str(model_dir), str(args.data)]
        cmd += [str(REAL["prompts"]), str(REAL["gens"]), str(REAL["max_tokens"]), steps]
    else:
        cmd = [sys.executable, args.trl_phases, args.trl_bench, SHAPE, str(PROMPTS), str(GENS)]
        cmd += [str(PROMPT_LEN), str(COMPLETION_LEN), steps]
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
    real = got.get("result", {}).get("real_tokens")  # realistic: TRL's num_tokens per step
    per_step = real[1 : len(got["steps_all"])] if real else [TOKENS] * len(rec["steps"])
    rec["tokens_per_s"] = [round(t / s) for t, s in zip(per_step, rec["steps"], strict=False)]
    if "result" not in got:
        rec["error"] = text[-2000:]
    return rec


def run_ours(entry: str, preset: str, args: argparse.Namespace, index: int, log: Path) -> dict[str, Any]:
    child = Path(args.work) / f"ours_{index}.json"
    presets = REAL_PRESETS if args.workload == "realistic" else OURS_PRESETS
    if preset not in presets:
        raise SystemExit(f"ours preset {preset!r} is not one of {sorted(presets)} ({args.workload} workload)")
    env = dict(os.environ, **presets[preset])
    if args.workload == "realistic":
        cmd = [sys.executable, str(HERE / "realistic.py"), "--gguf", str(args.gguf), "--data", str(args.data)]
    else:
        cmd = [sys.executable, str(HERE / "side_by_side.py"), SHAPE]
    cmd += ["--steps", str(args.steps), "--only-ours", "--out", str(child)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        text = (raw.decode() if isinstance(raw, bytes) else raw) + "\nTIMEOUT"
    log.write_text(text)
    rec: dict[str, Any] = {"entry": entry, "side": "ours", "preset": preset, "env": presets[preset]}
    if not child.exists():
        return {**rec, "steps": [], "error": text[-2000:]}
    got = json.loads(child.read_text())
    child.unlink()
    got.pop("all_metrics_last_step", None)
    steps = [s["step_s"] for s in got["steps"]]
    tps = [s.get("tokens_per_s", round(TOKENS / s["step_s"])) for s in got["steps"]]
    return {**rec, **got, "per_step": got["steps"], "steps": steps, "tokens_per_s": tps}


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
        s = sides.setdefault(side_key(rec), {"steps": [], "tps": [], "run_medians": []})
        s["steps"] += rec["steps"]
        s["tps"] += rec["tokens_per_s"]
        s["run_medians"].append(round(statistics.median(rec["steps"]), 3))
    for s in sides.values():
        s.update(spread(s["steps"]))
        s["tokens_per_s"] = round(statistics.median(s["tps"]))
        s["tokens_per_s_spread"] = spread(s["tps"])
    ratios = {}
    for ours in (k for k in sides if k.startswith("ours")):
        for other in (k for k in sides if k != ours):
            ratios[f"{ours} / {other}"] = round(sides[ours]["tokens_per_s"] / sides[other]["tokens_per_s"], 2)
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
                f"{side_key(r)} run phases (medians): generate {r.get('generate_s', spans.get('time/generate_s'))}"
                f" update {r.get('update_s', spans.get('time/update_s'))} (MFU {r.get('update_mfu')})"
                f" handoff {r.get('handoff_s')} check {spans.get('time/handoff_check_s', '-')}"
                f" grade wait {r.get('grade_wait_s', spans.get('time/grade_wait_s'))}"
            )
            if "running_full_frac_median" in r:  # realistic: issue 31's engine occupancy and lag
                lines.append(
                    f"{side_key(r)} engine: running mean {r['running_mean_median']} full-frac"
                    f" {r['running_full_frac_median']} lag mean {r['lag_mean_median']} resp len"
                    f" {r.get('response_len_mean')} trunc {r.get('truncation_rate')} reward {r.get('reward_mean')}"
                )
    lines += [f"ratio {k}: {v}x" for k, v in summary["ratios"].items()]
    lines.append(f"TRL best matched setting (IS off) in this call: {summary['trl_best_matched']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("anchor", "realistic"), default="anchor")
    ap.add_argument("--gguf", type=Path, help="realistic: the SmolLM2 GGUF file")
    ap.add_argument("--data", type=Path, help="realistic: GSM8K JSONL (datasets/recipes/gsm8k.py)")
    ap.add_argument("--trl-steps", type=int, default=None, help="TRL's measured steps (default: --steps)")
    ap.add_argument(
        "--trl-bench", default=None, help="trl_bench.py (anchor) / trl_realistic.py (TRL entries)"
    )
    ap.add_argument("--trl-phases", default=None, help="path to trl_phases.py (TRL entries need it)")
    ap.add_argument("--schedule", default="ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run (one more runs first)")
    ap.add_argument("--budget", type=float, default=560.0, help="seconds of wall time for the whole schedule")
    ap.add_argument("--run-timeout", type=int, default=300)
    ap.add_argument("--work", default="/tmp/rrl_interleave")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.workload == "realistic" and not (args.gguf and args.data):
        raise SystemExit("--workload realistic needs --gguf and --data")
    first_wall = REAL_FIRST_WALL_S if args.workload == "realistic" else FIRST_WALL_S
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
        if last_wall.get(kind, first_wall[kind]) > left:
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
        "workload": args.workload,
        "tokens_per_step": TOKENS if args.workload == "anchor" else "real tokens, per step",
        "runs": runs,
        **summary,
    }
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(table(runs, summary), flush=True)
    if skipped:
        print(f"skipped (budget): {skipped}", flush=True)


if __name__ == "__main__":
    main()
