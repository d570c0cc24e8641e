"""Issues 35 and 31: ours and TRL 1.16 interleaved in ONE call, so run-to-run noise cannot decide it.

    python bench/gpu/interleave.py --trl-bench trl_bench.py --trl-phases trl_phases.py \
        --schedule ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours --steps 5 --budget 560 --out OUT.json
    python bench/gpu/interleave.py --workload realistic --model FILE.gguf --data GSM8K.jsonl \
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
listed. The JSON (``throughput.result``) names the ``workload`` and lists every run as ``{"name", "steps_s",
"tokens", "gen_tokens", "reward"}`` over its measured steps; each side's throughput is Σtokens/Σtime over all its
steps (repeats pooled) and every ratio is a ratio of those (``throughput.py``), never a median of per-step rates.
Step-time medians and spreads are printed beside. Tokens per step: the anchor's nominal 32 x 8 x (128 + 256), the
realistic workload's real prompt + response tokens.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from reasoning_rl.step_cost import Bucket, curve_lines

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import throughput  # noqa: E402
from realistic import hf_model_dir  # noqa: E402

PROMPTS, GENS, PROMPT_LEN = int(os.environ.get("SBS_PROMPTS", 32)), 8, 128
COMPLETION_LEN = int(os.environ.get("SBS_COMPLETION_LEN", 256))
TOKENS = PROMPTS * GENS * (PROMPT_LEN + COMPLETION_LEN)
SHAPE = os.environ.get("SBS_SHAPE", "qwen")
FIRST_WALL_S = {"ours": 170.0, "trl": 140.0}  # 2026-12-01/02 runs: 149-164 s and 124-126 s, start included
REAL_FIRST_WALL_S = {"ours": 160.0, "trl": 260.0}  # realistic: ~9 s/step ours, ~30 s/step TRL (issue 20)
REAL = {  # realistic.py reads the same variables
    "prompts": int(os.environ.get("REAL_PROMPTS", 64)),
    "gens": int(os.environ.get("REAL_GENS", 8)),
    "max_tokens": int(os.environ.get("REAL_MAX_TOKENS", 1024)),
}
# Our settings tried against the default (environment of side_by_side.py's child). vLLM 0.24 turns async
# scheduling on by itself for our in-process engine (its log: "Asynchronous scheduling is enabled."), so the
# variant worth timing is the one without it.
OURS_PRESETS: dict[str, dict[str, str]] = {
    "default": {},
    "async_off": {"OURS_ENGINE_ARGS": json.dumps({"async_scheduling": False})},
    # two micro-batches of 128 rows at the anchor's padded width (448: ~192 prompt + 256 response tokens) instead
    # of the default's five: the update alone took 0.894 s vs 1.005 s on one H100 (issue42g_update_h100.json)
    # (H200 only: out of memory beside the engine on an H100 80GB, issue42h_anchor_h100_mb2_oom.json)
    "mb2": {"OURS_MICRO_TOKENS": str(128 * 448)},
    # the product's default: the memory plan's largest micro-batch for the card (2 micro-batches on an H200, 3 on
    # an H100 80GB)
    "plan": {"OURS_MICRO_TOKENS": "plan"},
    # the same with vLLM's engine core in a process of its own (rollout.engine_process): 1.045x ours:plan on one
    # H100 (issue42j_anchor_proc_h100.json)
    "proc": {"OURS_MICRO_TOKENS": "plan", "OURS_ENGINE_PROCESS": "1"},
    # and two engine cores, each in a process of its own with half the requests (rollout.engine_cores): the decode
    # probe ran 1.9x one core under py-spy (bench/gpu/engine_mode.py mp2)
    "proc2": {"OURS_MICRO_TOKENS": "plan", "OURS_ENGINE_PROCESS": "1", "OURS_ENGINE_CORES": "2"},
}
REAL_PRESETS: dict[str, dict[str, str]] = {
    "sync": {"REAL_MAX_LAG": "0"},
    "noskip": {"REAL_MAX_LAG": "0", "REAL_SKIP_ZERO_ADV": "0"},  # matched work: the full pass, as TRL runs it
    **{f"lag{k}": {"REAL_MAX_LAG": str(k)} for k in (1, 2, 3)},
    # issue 44: the engine in a process of its own on the same GPU (resources.share_gpus), decoding through the
    # update; share0 is the same placement in synchronous steps (what the second process alone costs)
    **{f"share{k}": {"REAL_MAX_LAG": str(k), "REAL_SHARE": "1"} for k in (0, 1, 2)},
}


def parse_trl(text: str) -> dict[str, Any]:
    """TRL's per-step wall times (``STEP n s``), phase timers, effective settings and ``RESULT`` from its log,
    and the per-step log dicts TRL prints (``{'loss': ..., 'num_tokens': ...}``: what a run cut before its
    RESULT line still has)."""
    out: dict[str, Any] = {"steps_all": [], "timers": [], "logs": []}
    for line in text.splitlines():
        if line.startswith("{'loss'") and "'num_tokens'" in line:
            out["logs"].append(ast.literal_eval(line))
        elif line.startswith("STEP "):
            out["steps_all"].append(float(line.split()[2].rstrip("s")))
        elif line.startswith("TIMERS "):
            out["timers"].append(json.loads(line[len("TIMERS ") :]))
        elif line.startswith("EFFECTIVE "):
            body = line[len("EFFECTIVE ") :]
            out["effective"] = json.loads(body[: body.rindex("}") + 1])
        elif line.startswith("RESULT "):
            out["result"] = json.loads(line[len("RESULT ") :])
    return out


def trl_record(name: str, got: dict[str, Any], workload: str) -> dict[str, Any]:
    """The measured steps (the first is warm-up) of a TRL log as a ``throughput`` run record. The realistic
    workload's tokens come from TRL's own counts: its RESULT line, else (a run cut by its timeout after its
    steps) its printed per-step logs (cumulative ``num_tokens``, 4 significant digits); with neither the run has
    no measured step, never the anchor's nominal count."""
    steps = got["steps_all"][1:]
    res = got.get("result", {})
    n = len(got["steps_all"])
    if workload == "realistic" and res.get("real_tokens"):
        tokens = [float(t) for t in res["real_tokens"][1:n]]
        per_sample = res.get("response_len_mean", [])[1:n]
        gen = [float(m) * REAL["prompts"] * REAL["gens"] for m in per_sample]
        reward = [float(r) for r in res.get("reward_mean", [])[1:n]]
    elif workload == "realistic":
        logs = got.get("logs", [])[:n]
        total = [float(log["num_tokens"]) for log in logs]
        tokens = [b - a for a, b in zip(total, total[1:], strict=False)]
        gen = [float(log["completions/mean_length"]) * REAL["prompts"] * REAL["gens"] for log in logs[1:]]
        reward = [float(log["reward"]) for log in logs[1:]]
    else:
        tokens = [float(TOKENS)] * len(steps)
        gen = [float(PROMPTS * GENS * COMPLETION_LEN)] * len(steps)
        reward = []
    steps = steps[: len(tokens)]
    return {
        "name": name,
        "steps_s": steps,
        "tokens": tokens[: len(steps)],
        "gen_tokens": gen[: len(steps)] if len(gen) >= len(steps) else None,
        "reward": reward,
    }


def run_trl(entry: str, mb: int, over: dict[str, Any], args: argparse.Namespace, log: Path) -> dict[str, Any]:
    env = dict(os.environ, MICRO=str(mb), TRL_OVERRIDES=json.dumps(over))
    steps = str((args.trl_steps or args.steps) + 1)
    if args.workload == "realistic":  # the model dir our runs converted from the GGUF (the same weights)
        cmd = [sys.executable, args.trl_phases, args.trl_bench, str(hf_model_dir(args.model)), str(args.data)]
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
    name = f"trl:{'off' if over else 'def'}:{mb}"
    rec: dict[str, Any] = {"entry": entry, "side": "trl", "micro": mb, "overrides": over}
    rec.update(timers=got["timers"], effective=got.get("effective"), steps_all=got["steps_all"])
    rec.update(trl_record(name, got, args.workload))
    if "result" not in got:
        rec["error"] = text[-2000:]
    return rec


def ours_record(name: str, got: dict[str, Any]) -> dict[str, Any]:
    """Our child's per-step values as a ``throughput`` run record."""
    per = got["steps"]
    tokens = [float(s.get("real_tokens", TOKENS)) for s in per]
    gen = [float(s.get("response_tokens", PROMPTS * GENS * COMPLETION_LEN)) for s in per]
    return {
        "name": name,
        "steps_s": [float(s["step_s"]) for s in per],
        "tokens": tokens,
        "gen_tokens": gen,
        "reward": [float(s["reward"]) for s in per if "reward" in s],
    }


def run_ours(
    entry: str, preset: str, args: argparse.Namespace, index: int, log: Path, steps: int
) -> dict[str, Any]:
    """One of our runs of ``steps`` measured steps; beyond ``--steps`` (the learning run) the extra steps are
    kept apart under ``learning`` and only the first ``--steps`` are compared."""
    child = Path(args.work) / f"ours_{index}.json"
    presets = REAL_PRESETS if args.workload == "realistic" else OURS_PRESETS
    if preset not in presets:
        raise SystemExit(f"ours preset {preset!r} is not one of {sorted(presets)} ({args.workload} workload)")
    env = dict(os.environ, **presets[preset])
    if args.workload == "realistic":
        cmd = [
            sys.executable,
            str(HERE / "realistic.py"),
            "--model",
            str(args.model),
            "--data",
            str(args.data),
        ]
    else:
        cmd = [sys.executable, str(HERE / "side_by_side.py"), SHAPE]
    cmd += ["--steps", str(steps), "--only-ours", "--out", str(child)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.run_timeout)
        text = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        text = (raw.decode() if isinstance(raw, bytes) else raw) + "\nTIMEOUT"
    log.write_text(text)
    rec: dict[str, Any] = {"entry": entry, "side": "ours", "preset": preset, "env": presets[preset]}
    name = f"ours:{preset}"
    if not child.exists():
        return {**rec, "name": name, "steps_s": [], "tokens": [], "error": text[-2000:]}
    got = json.loads(child.read_text())
    child.unlink()
    got.pop("all_metrics_last_step", None)
    out = {**rec, **got, "per_step": got["steps"], **ours_record(name, got)}
    if len(out["steps_s"]) > args.steps:  # the learning run: all steps kept apart, the first N compared
        out["learning"] = {k: out[k] for k in ("steps_s", "tokens", "gen_tokens", "reward")}
        for k in ("steps_s", "tokens", "gen_tokens"):
            out[k] = out[k][: args.steps]
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``throughput.summarise`` over the runs that measured steps, and TRL's best matched (IS off) setting by
    Σtokens/Σtime."""
    done = [r for r in runs if r.get("steps_s")]
    out = throughput.summarise(done)
    offs = [k for k in out["sides"] if k.startswith("trl:off")]
    out["trl_best_matched"] = max(offs, key=lambda k: out["sides"][k]["tokens_per_s"]) if offs else None
    return out


def best_off(runs: list[dict[str, Any]]) -> int:
    """The IS-off micro-batch with the higher Σtokens/Σtime so far in this call (32 when none ran)."""
    best = summarise([r for r in runs if r["side"] == "trl" and r["overrides"]])["trl_best_matched"]
    return int(best.split(":")[2]) if best else 32


def table(runs: list[dict[str, Any]], summary: dict[str, Any]) -> str:
    lines = ["run  name               steps 2..N (s)                                 Σtok/Σs  wall"]
    for i, r in enumerate(runs):
        steps = " ".join(f"{v:.2f}" for v in r.get("steps_s", []))
        tps = f"{round(throughput.rate(r['tokens'], r['steps_s'])):>7}" if r.get("steps_s") else "   -   "
        err = "  ERROR" if r.get("error") else ""
        lines.append(f"{i:>3}  {r['name']:<18} {steps:<46} {tps}  {r.get('wall_s', 0):>5}{err}")
        if r.get("reward"):
            lines.append(f"     reward per step: {' '.join(f'{x:.3f}' for x in r['reward'])}")
        if r.get("learning"):
            lines.append(
                f"     (learning run: {len(r['learning']['steps_s'])} steps; the first {len(r['steps_s'])} compared)"
            )
    lines.append(throughput.table(summary))
    for r in runs:
        if r["side"] == "ours" and r.get("steps_s"):
            spans = r.get("spans_s", {})
            lines.append(
                f"{r['name']} run phases (medians): generate {r.get('generate_s', spans.get('time/generate_s'))}"
                f" update {r.get('update_s', spans.get('time/update_s'))} (MFU over computed rows"
                f" {r.get('update_mfu')}, skipped rows {r.get('skipped_rows_median', 0)})"
                f" handoff {r.get('handoff_s')} check {spans.get('time/handoff_check_s', '-')}"
                f" grade wait {r.get('grade_wait_s', spans.get('time/grade_wait_s'))}"
            )
            if (
                "running_full_frac" in r
            ):  # realistic: issue 31's engine occupancy (over generation time) and lag
                lines.append(
                    f"{r['name']} engine: running mean {r['running_mean']} full-frac"
                    f" {r['running_full_frac']} lag mean {r['lag_mean_median']} resp len"
                    f" {r.get('response_len_mean')} trunc {r.get('truncation_rate')} reward {r.get('reward_mean')}"
                )
            if r.get("step_cost"):  # issue 44: what an engine step costs at each running batch
                lines.append(f"{r['name']} engine step cost by running batch (measured steps):")
                lines += ["     " + line for line in curve_lines([Bucket(**b) for b in r["step_cost"]])]
    lines.append(
        f"TRL best matched setting (IS off) in this call, by Σtokens/Σtime: {summary['trl_best_matched']}"
    )
    return "\n".join(lines)


def workload_of(args: argparse.Namespace) -> dict[str, Any]:
    """What ran: model shape, lengths, batch (the JSON's ``workload``)."""
    if args.workload == "realistic":
        return {
            "name": "realistic",
            "model": args.model.name,
            "lr": float(os.environ.get("REAL_LR", 1e-6)),
            "data": args.data.name,
            "prompts": REAL["prompts"],
            "samples_per_prompt": REAL["gens"],
            "max_tokens": REAL["max_tokens"],
            "temperature": float(
                os.environ.get("REAL_TEMPERATURE", 1.0)
            ),  # realistic.py and TRL's side read it
            "eos": True,
            "tokens": "prompt + response of every sample, per step",
        }
    return {
        "name": "anchor",
        "model": f"{SHAPE} shape, random init",
        "prompts": PROMPTS,
        "samples_per_prompt": GENS,
        "prompt_tokens": PROMPT_LEN,
        "response_tokens": COMPLETION_LEN,
        "eos": False,
        "tokens": f"{TOKENS} per step (fixed length)",
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("anchor", "realistic"), default="anchor")
    ap.add_argument(
        "--model", type=Path, help="realistic: the SmolLM2 GGUF file, or an HF dir (an SFT export)"
    )
    ap.add_argument("--data", type=Path, help="realistic: GSM8K JSONL (datasets/recipes/gsm8k.py)")
    ap.add_argument("--trl-steps", type=int, default=None, help="TRL's measured steps (default: --steps)")
    ap.add_argument(
        "--trl-bench", default=None, help="trl_bench.py (anchor) / trl_realistic.py (TRL entries)"
    )
    ap.add_argument("--trl-phases", default=None, help="path to trl_phases.py (TRL entries need it)")
    ap.add_argument("--schedule", default="ours,trl:off:32,trl:off:64,trl:def:32,ours,trl:off:best,ours")
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run (one more runs first)")
    ap.add_argument(
        "--learn-steps",
        type=int,
        default=0,
        help="realistic: the first ours:sync run takes this many steps (the reward curve); its first --steps "
        "measured steps are the ones compared",
    )
    ap.add_argument("--budget", type=float, default=560.0, help="seconds of wall time for the whole schedule")
    ap.add_argument("--run-timeout", type=int, default=300)
    ap.add_argument("--work", default="/tmp/rrl_interleave")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.workload == "realistic" and not (args.model and args.data):
        raise SystemExit("--workload realistic needs --model and --data")
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
        host = host_state()
        t = time.time()
        log = Path(args.work) / f"run{i}.log"
        if kind == "ours":
            preset = parts[1] if len(parts) > 1 else "default"
            learn = args.learn_steps > 0 and preset == "sync" and not any(r.get("learning") for r in runs)
            rec = run_ours(entry, preset, args, i, log, args.learn_steps if learn else args.steps)
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
        rec["host_before"] = host
        print(f"RUN {i} host before: {json.dumps(host)[:400]}", flush=True)
        last_wall[kind] = rec["wall_s"]
        if rec.get("learning"):  # a plain run is shorter: scale the steps' share (the start is ~60 s)
            last_wall[kind] = 60 + (rec["wall_s"] - 60) * (args.steps + 1) / (args.learn_steps + 1)
        runs.append(rec)
        print(f"RUN {i} {rec['name']} steps={rec.get('steps_s')} wall={rec['wall_s']}", flush=True)
        if rec.get("error"):
            print(f"RUN {i} ERROR tail: {rec['error'][-600:]}", flush=True)
        write(args, runs, skipped)  # after every run: a call cut by its time limit keeps what it measured
    print(table(runs, write(args, runs, skipped)), flush=True)
    if skipped:
        print(f"skipped (budget): {skipped}", flush=True)


def host_state() -> dict[str, Any]:
    """What else holds the machine as a run starts (its generation is bound by the host: two runs of the same
    work have differed by 20-40 % in generation time): load averages, the processes with the highest CPU share
    over their lifetime (``ps``'s pcpu), GPU clocks, temperature, power and memory in use."""
    import shutil

    state: dict[str, Any] = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
    ps = subprocess.run(
        ["ps", "-eo", "pid,pcpu,rss,comm", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True
    )
    state["top_processes"] = [line.split(None, 3) for line in ps.stdout.splitlines()[:6]]
    if shutil.which("nvidia-smi"):
        query = "clocks.sm,clocks.mem,temperature.gpu,power.draw,memory.used,utilization.gpu"
        smi = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]
        state["gpu"] = subprocess.run(smi, capture_output=True, text=True).stdout.strip()
    return state


def write(args: argparse.Namespace, runs: list[dict[str, Any]], skipped: list[str]) -> dict[str, Any]:
    """The call's result file as it stands (throughput.result over the runs with measured steps)."""
    summary = summarise(runs)
    result = throughput.result(
        workload_of(args),
        [r for r in runs if r.get("steps_s")],
        schedule=args.schedule,
        skipped=skipped,
        failed=[r for r in runs if not r.get("steps_s")],
        trl_best_matched=summary["trl_best_matched"],
    )
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    return summary


if __name__ == "__main__":
    main()
