"""verl 0.9.1's GRPO trainer on the TRL-anchor workload (one GPU): its settings, runs, log parsing, comparison.

Here (CPU; verl 0.9.1 + hydra-core + omegaconf importable, e.g. ``pip install --target /tmp/verl_cpu --no-deps``):
    python3 bench/gpu/verl_runs.py check --root /tmp/vb_tiny     # compose + validate every setting (verl_data.py tiny)
On the GPU machine (``bench/gpu/verl_sbs.sh`` calls these, after the vLLM and verl kits):
    python3 bench/gpu/verl_runs.py sweep S1 S2 S3 --budget 520 --out-dir DIR
    python3 bench/gpu/verl_runs.py compare --sweep DIR/sweep.json --budget 560 --out-dir DIR

Workload (as ours and TRL in ``side_by_side.py``): random-init Qwen2-0.5B shape, 32 prompts x 8 samples per step,
the same prompt text, 256 generated tokens (EOS ignored), one optimizer step per batch (mini-batch = batch),
no KL, lr 1e-6, vLLM colocated at gpu_memory_utilization 0.3, 5 steps, median of steps 2-5.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = Path("/tmp/verl_bench")  # verl_data.py writes the model, parquet files and reward there
STEPS = 5
TOKENS_PER_STEP = 32 * 8 * (128 + 256)  # nominal, as side_by_side.py counts for ours and TRL
GEN_TOKENS_PER_STEP = 32 * 8 * 256


def workload(root: Path, steps: int) -> list[str]:
    """Overrides every setting shares: the workload and what makes verl 0.9.1 run on this machine."""
    return [
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=False",
        f"data.train_files={root}/train.parquet", f"data.val_files={root}/val.parquet",
        "data.train_batch_size=32", "data.max_prompt_length=256", "data.max_response_length=256",
        "data.filter_overlong_prompts=False", "data.truncation=error", "data.shuffle=False",
        f"actor_rollout_ref.model.path={root}/model",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # flash-attn is not installed
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",  # x rollout.n = 256 sequences: one optimizer step
        "actor_rollout_ref.actor.use_kl_loss=False", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.ignore_eos=True",
        # 0.9 reads the reward function from reward.*; the top-level custom_reward_function is ignored
        f"reward.custom_reward_function.path={root}/reward.py", "reward.custom_reward_function.name=compute_score",
        "trainer.logger=console", "trainer.n_gpus_per_node=1", "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
        "trainer.val_before_train=False", "trainer.project_name=rrl_sbs", "trainer.experiment_name=verl_qwen",
    ]


@dataclass(frozen=True)
class Setting:
    """One verl configuration tried: what it changes (said in words for the results table) and how."""

    summary: str
    overrides: tuple[str, ...]


_MICRO32 = ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32")
# verl's perf guide: no gradient checkpointing when memory allows, dynamic batch size with a token budget of at
# least 2x (prompt + response) per micro-batch, larger for forward-only log-prob passes. Remove-padding off:
# without flash-attn, transformers runs SDPA over the packed micro-batch with a dense block-causal mask
# (quadratic in the packed length); padded rows use the fused causal kernels.
_TUNED = ("actor_rollout_ref.model.enable_gradient_checkpointing=False",
          "actor_rollout_ref.model.use_remove_padding=False",
          "actor_rollout_ref.actor.use_dynamic_bsz=True",
          "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576",  # as ours: 64 x 384 tokens per micro-batch
          "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=49152")
# Without flash-attn, verl's log-probs fall back to logprobs_from_logits_v2: a Python loop of log_softmax over
# every token row (bf16 logits). verl's fused linear + log-prob kernel (torch backend, 512-token chunks) avoids
# both that loop and the full logits. Then work neither ours nor TRL does here: keep vLLM awake during the update
# (both run so) and take the rollout's own log-probs as the old policy's instead of a second forward pass
# (verl's documented bypass mode; ours and TRL use the policy's detached log-probs, one update per batch).
_LEAN = ("actor_rollout_ref.model.use_fused_kernels=True",
         "actor_rollout_ref.model.fused_kernel_options.impl_backend=torch",
         "actor_rollout_ref.rollout.free_cache_engine=False",
         "algorithm.rollout_correction.bypass_mode=True")
_FAST_POLL = (f"trainer.v1.sampler.custom_sampler.path={HERE}/verl_fast_poll.py",
              "trainer.v1.sampler.custom_sampler.name=FastPollReplayBuffer")
SETTINGS: dict[str, Setting] = {
    "defaults": Setting("verl defaults: gradient checkpointing on, remove-padding on, micro-batch 32", _MICRO32),
    "S1": Setting("gradient checkpointing off, remove-padding off, dynamic batch size (24k tokens per "
                  "micro-batch, 48k for log-probs)", _TUNED),
    "S2": Setting("S1 + fused linear/log-prob kernels + vLLM kept awake (free_cache_engine=False) + bypass mode "
                  "(old log-probs = rollout's)", _TUNED + _LEAN),
    "S3": Setting("S2 + replay buffer polled every 0.05 s instead of verl's fixed 2 s (a custom sampler, "
                  "verl_fast_poll.py)", _TUNED + _LEAN + _FAST_POLL),
    "S2_rmpad": Setting("S2 with remove-padding on (packed micro-batches, dense block mask without flash-attn)",
                        tuple(o.replace("use_remove_padding=False", "use_remove_padding=True")
                              for o in _TUNED + _LEAN)),
}


def overrides(name: str, root: Path = ROOT, steps: int = STEPS) -> list[str]:
    if name not in SETTINGS:
        raise SystemExit(f"verl_runs: unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    return workload(root, steps) + list(SETTINGS[name].overrides)


# ---------------------------------------------------------------- processes, memory

VLLM_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "PYTHONUNBUFFERED": "1", "NCCL_NVLS_ENABLE": "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def env_for(system: str) -> dict[str, str]:
    """Each system's own site: verl's wheels (/tmp/vsite) never mix with ours/TRL's (/tmp/site)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    env.update(VLLM_ENV)
    if system == "verl":
        env.update(PYTHONPATH="/tmp/vsite:/tmp/vllm_kit/site", RAY_DEDUP_LOGS="0")
    else:  # what the earlier side-by-side ran under (vllm_kit install.sh exports these)
        env.update(PYTHONPATH=f"/tmp/site:{HERE.parent.parent}:/tmp/vllm_kit/site", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    return env


class GpuMemory:
    """Whole-device memory (nvidia-smi, every 0.5 s) while a system runs: verl's vLLM server lives in another
    process than its trainer, so no single torch allocator sees the total."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuMemory:
        if shutil.which("nvidia-smi") is None:  # a CPU machine (tests of this module): no samples
            return self
        self._proc = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                       "-lms", "500"], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line.strip()))

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def peak_gib(self) -> float | None:
        return round(max(self.samples) / 1024, 1) if self.samples else None


def gpu_state() -> tuple[list[int], int]:
    """(pids of processes on the GPU, MiB in use)."""
    if shutil.which("nvidia-smi") is None:
        return [], 0
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False).stdout
    used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, check=False).stdout.strip()
    return [int(p) for p in apps.split() if p.isdigit()], int(used) if used.isdigit() else 0


def free_gpu(wait_s: float = 30.0) -> list[int]:
    """Wait for the GPU to empty after a run; end, by pid, what the run left on it (Ray actors that outlive a
    killed driver). Returns the pids it had to end."""
    deadline = time.time() + wait_s
    pids, used = gpu_state()
    while (pids or used > 2048) and time.time() < deadline:
        time.sleep(1)
        pids, used = gpu_state()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        time.sleep(3)
    return pids


def run_logged(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int | None, float]:
    """Run ``cmd`` in its own process group, each output line into ``log`` prefixed with the seconds since start;
    on timeout end the whole group. Returns (rc or None on timeout, wall seconds)."""
    started = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            text=True, errors="replace")

    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("w")

    def copy() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(f"[{time.time() - started:7.1f}] {line}")
            fh.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        rc: int | None = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    reader.join(timeout=10)  # a Ray worker that outlived the group can hold the pipe open
    fh.close()
    return rc, round(time.time() - started, 1)


# ---------------------------------------------------------------- verl's console log

STEP_LINE = re.compile(r"^\[\s*([\d.]+)\].*?(?:\s|\))step:(\d+) - (.*)$")  # run_logged's [seconds] prefix
KEEP = ("timing_s/step", "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv",
        "timing_s/update_actor", "timing_s/update_weights", "perf/throughput", "perf/mfu/actor",
        "perf/max_memory_allocated_gb", "perf/max_memory_reserved_gb", "perf/total_num_tokens",
        "response_length/mean", "prompt_length/mean", "critic/score/mean", "actor/pg_loss")


def _number(text: str) -> float | None:
    text = text.strip()
    if text.endswith(")") and "(" in text:  # numpy scalars print as np.float64(1.5)
        text = text[text.index("(") + 1:-1]
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
    med = {k: round(statistics.median([r[k] for r in warm if k in r]), 3) for k in KEEP
           if any(k in r for r in warm)}
    out: dict[str, Any] = {"steps_parsed": len(rows), "medians": med,
                           "step_s": [r.get("timing_s/step") for r in rows],
                           "first_step_logged_at_s": rows[0]["t"] if rows else None}
    gaps = [b["t"] - a["t"] for a, b in zip(rows, rows[1:], strict=False) if b["step"] >= 3]  # log line to log line
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
            return " | ".join(x.strip() for x in lines[i:i + 3])[:600]
    return None


def run_verl(name: str, out_dir: Path, timeout: float, steps: int = STEPS) -> dict[str, Any]:
    log = out_dir / f"verl_{name}.log"
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides(name, ROOT, steps),
           f"hydra.run.dir=/tmp/verl_hydra/{name}"]
    with GpuMemory() as mem:
        rc, wall = run_logged(cmd, env_for("verl"), log, timeout)
    killed = free_gpu()
    text = log.read_text(errors="replace")
    res: dict[str, Any] = {"system": "verl", "setting": name, "summary": SETTINGS[name].summary,
                           "overrides": list(SETTINGS[name].overrides), "rc": rc, "wall_s": wall,
                           "gpu_peak_gib": mem.peak_gib(), "killed_pids": killed, **summarize(parse_steps(text))}
    res["complete"] = rc == 0 and res["steps_parsed"] == steps
    if not res["complete"]:
        res["error"] = first_error(text) or text[-1500:]
    print(f"verl {name}: rc={rc} wall={wall}s steps={res['steps_parsed']} "
          f"step={res.get('step_s_median')} tok/s={res.get('tokens_per_s')}", flush=True)
    return res


# ---------------------------------------------------------------- phases

def sweep(names: list[str], budget: float, out_dir: Path) -> None:
    """Each setting in turn while the call's budget lasts; a run starts only if the last one's wall time fits."""
    deadline = time.time() + budget
    results, estimate = [], float(os.environ.get("VERL_FIRST_RUN_S", 240))
    for name in names:
        left = deadline - time.time()
        if left < estimate:
            results.append({"system": "verl", "setting": name, "skipped": f"{left:.0f} s left, a run needs ~{estimate:.0f} s"})
            continue
        res = run_verl(name, out_dir, left - 5)
        results.append(res)
        estimate = res["wall_s"] * 0.9 if res["complete"] else estimate  # later starts reuse compile caches
        (out_dir / "sweep.json").write_text(json.dumps(results, indent=1))
    (out_dir / "sweep.json").write_text(json.dumps(results, indent=1))


def best_setting(sweep_json: Path) -> str:
    runs = [r for r in json.loads(sweep_json.read_text()) if r.get("complete")]
    if not runs:
        return "S1"
    return min(runs, key=lambda r: r["step_s_median"])["setting"]


def run_ours(out_dir: Path, timeout: float) -> dict[str, Any]:
    out = out_dir / "ours.json"
    cmd = [sys.executable, str(HERE / "side_by_side.py"), "qwen", "--steps", str(STEPS - 1), "--only-ours",
           "--out", str(out)]
    with GpuMemory() as mem:
        rc, wall = run_logged(cmd, env_for("ours"), out_dir / "ours.log", timeout)
    free_gpu()
    res: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {"system": "reasoning-rl"}
    res.pop("all_metrics_last_step", None)
    res.update(rc=rc, wall_s=wall, gpu_peak_gib=mem.peak_gib())
    if not out.is_file():
        res["error"] = (out_dir / "ours.log").read_text(errors="replace")[-1500:]
    return res


def run_trl(trl_bench: Path, out_dir: Path, timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, str(trl_bench), "qwen", "32", "8", "128", "256", str(STEPS)]
    env = dict(env_for("trl"), MICRO="32")
    with GpuMemory() as mem:
        rc, wall = run_logged(cmd, env, out_dir / "trl.log", timeout)
    free_gpu()
    text = (out_dir / "trl.log").read_text(errors="replace")
    res: dict[str, Any] = {"system": "trl"}
    for line in text.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
    if "step_s_median" not in res:
        res["error"] = text[-1500:]
    res.update(rc=rc, wall_s=wall, gpu_peak_gib=mem.peak_gib())
    return res


def compare(sweep_json: Path, trl_bench: Path, budget: float, out_dir: Path, extra: list[str]) -> None:
    """Ours, TRL, then verl's best sweep setting, back to back in one call; then, while the budget lasts, the
    ``extra`` settings the sweep had no time for. The fastest verl run of this call is the one compared."""
    deadline = time.time() + budget
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    sweep_runs = json.loads(sweep_json.read_text()) if sweep_json.is_file() else []
    result["sweep"] = sweep_runs
    result["ours"] = run_ours(out_dir, min(220.0, deadline - time.time()))
    result["trl"] = run_trl(trl_bench, out_dir, min(170.0, deadline - time.time()))
    best = best_setting(sweep_json) if sweep_json.is_file() else "S1"
    runs = [run_verl(best, out_dir, deadline - time.time() - 5)]
    estimate = runs[0]["wall_s"]
    tried = {r["setting"] for r in sweep_runs if "skipped" not in r}
    for name in [n for n in extra if n not in tried]:
        if deadline - time.time() < estimate:
            runs.append({"system": "verl", "setting": name, "skipped": f"{deadline - time.time():.0f} s left"})
            continue
        runs.append(run_verl(name, out_dir, deadline - time.time() - 5))
    result["verl_runs"] = runs
    done = [r for r in runs if r.get("step_s_median")]
    result["verl"] = min(done, key=lambda r: r["step_s_median"]) if done else runs[0]
    for peer in ("verl", "trl"):
        if result[peer].get("tokens_per_s") and result["ours"].get("tokens_per_s"):
            result[f"ratio_ours_over_{peer}"] = round(result["ours"]["tokens_per_s"] / result[peer]["tokens_per_s"], 2)
    (out_dir / "compare.json").write_text(json.dumps(result, indent=1, default=str))
    print(table(result), flush=True)


def table(r: dict[str, Any]) -> str:
    o, t, v = r["ours"], r["trl"], r["verl"]
    vm = v.get("medians", {})
    rows = [
        ("step time (median, steps 2-5)", o.get("step_s_median"), t.get("step_s_median"), v.get("step_s_median")),
        ("tokens/s/GPU (32x8x(128+256) nominal)", o.get("tokens_per_s"), t.get("tokens_per_s"), v.get("tokens_per_s")),
        ("generation s", o.get("generate_s"), None, vm.get("timing_s/gen")),
        ("generation tokens/s", o.get("gen_tokens_per_s"), None, v.get("gen_tokens_per_s")),
        ("old log-prob s", None, None, vm.get("timing_s/old_log_prob")),
        ("update s", o.get("update_s"), None, vm.get("timing_s/update_actor")),
        ("update MFU", o.get("update_mfu"), None, vm.get("perf/mfu/actor")),
        ("hand-off s", o.get("handoff_s"), None, vm.get("timing_s/update_weights")),
        ("GPU peak GiB (nvidia-smi)", o.get("gpu_peak_gib"), t.get("gpu_peak_gib"), v.get("gpu_peak_gib")),
        ("trainer allocator peak GiB", o.get("peak_mem_gib"), t.get("peak_mem_gib"), vm.get("perf/max_memory_allocated_gb")),
        ("wall s (incl. start)", o.get("wall_s"), t.get("wall_s"), v.get("wall_s")),
    ]
    lines = [f"| | ours | TRL 1.16 | verl 0.9.1 ({v.get('setting')}) |", "|---|---|---|---|"]
    lines += [f"| {name} | {a} | {b} | {c} |" for name, a, b, c in rows]
    lines.append(f"ratio ours/verl tokens/s: {r.get('ratio_ours_over_verl')}   ours/TRL: {r.get('ratio_ours_over_trl')}")
    for s in r.get("sweep", []) + [dict(x, setting=f"{x['setting']} (this call)") for x in r.get("verl_runs", [])]:
        lines.append(f"verl {s.get('setting')}: step {s.get('step_s_median')} s, {s.get('tokens_per_s')} tok/s, "
                     f"complete={s.get('complete')} {s.get('skipped') or s.get('error') or ''}"[:300])
    return "\n".join(lines)


def check(names: list[str], root: Path) -> None:
    """Compose each setting against verl's own hydra config and run the checks its entry point and workers run."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config_dir = str(Path(verl.__file__).parent / "trainer" / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        for name in names:
            cfg = compose(config_name="ppo_trainer", overrides=overrides(name, root))
            OmegaConf.resolve(cfg)
            validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
            a, ro, m = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.model
            for section in (ro, m, cfg.algorithm):  # the sections the workers build dataclasses from
                omega_conf_to_dataclass(section)
            assert a.use_dynamic_bsz == ro.log_prob_use_dynamic_bsz  # engine_workers.py asserts this
            assert not need_reference_policy(cfg) and not need_critic(cfg)
            assert cfg.reward.custom_reward_function.path == f"{root}/reward.py"
            sampler = cfg.trainer.v1.sampler.custom_sampler
            if sampler.path:
                sys.path.insert(0, str(Path(sampler.path).parent))
                __import__(Path(sampler.path).stem)
            print(f"{name}: ok  gc={m.enable_gradient_checkpointing} rmpad={m.use_remove_padding} "
                  f"dyn_bsz={a.use_dynamic_bsz} tok={a.ppo_max_token_len_per_gpu}/{ro.log_prob_max_token_len_per_gpu} "
                  f"micro={a.ppo_micro_batch_size_per_gpu} fused={m.use_fused_kernels} free_cache={ro.free_cache_engine} "
                  f"bypass={cfg.algorithm.rollout_correction.bypass_mode} sampler={sampler.name} "
                  f"mini={a.ppo_mini_batch_size} n={ro.n} ignore_eos={ro.ignore_eos} steps={cfg.trainer.total_training_steps}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="phase", required=True)
    c = sub.add_parser("check")
    c.add_argument("names", nargs="*", default=list(SETTINGS))
    c.add_argument("--root", type=Path, default=ROOT)
    s = sub.add_parser("sweep")
    s.add_argument("names", nargs="+")
    s.add_argument("--budget", type=float, required=True)
    s.add_argument("--out-dir", type=Path, required=True)
    k = sub.add_parser("compare")
    k.add_argument("--sweep", type=Path, required=True)
    k.add_argument("--trl", type=Path, required=True, help="TRL's bench script (../shared/gpu/trl_bench.py)")
    k.add_argument("--budget", type=float, required=True)
    k.add_argument("--out-dir", type=Path, required=True)
    k.add_argument("--extra", nargs="*", default=[], help="settings to run after the comparison if time is left")
    args = ap.parse_args()
    if args.phase == "check":
        check(args.names, args.root)
        return
    for name in getattr(args, "names", []) + getattr(args, "extra", []):
        overrides(name)  # unknown names fail before any run
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.phase == "sweep":
        sweep(args.names, args.budget, args.out_dir)
    else:
        compare(args.sweep, args.trl, args.budget, args.out_dir, args.extra)


if __name__ == "__main__":
    main()
