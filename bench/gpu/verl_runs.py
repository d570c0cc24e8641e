"""verl 0.9.1's GRPO trainer on the TRL-anchor workload (one GPU): its settings, the sweep, the comparison.

Here (CPU; verl 0.9.1 + hydra-core + omegaconf importable, e.g. ``pip install --target /tmp/verl_cpu --no-deps``):
    python3 bench/gpu/verl_runs.py check --root /tmp/vb_tiny     # compose + validate every setting (verl_data.py tiny)
On the GPU machine (``bench/gpu/verl_sbs.sh`` calls these, after the vLLM and verl kits):
    python3 bench/gpu/verl_runs.py sweep S1 S2 S3 --budget 520 --out-dir DIR
    python3 bench/gpu/verl_runs.py compare --sweep DIR/sweep.json --trl /tmp/trl_bench.py --budget 560 --out-dir DIR
    python3 bench/gpu/verl_runs.py pair S3 --budget 560 --out-dir DIR         # ours, then one verl setting
Here or there, after a parser fix:  python3 bench/gpu/verl_runs.py rebuild DIR/compare.json

Workload (as ours and TRL in ``side_by_side.py``): random-init Qwen2-0.5B shape, 32 prompts x 8 samples per step,
the same prompt text, 256 generated tokens (EOS ignored), one optimizer step per batch (mini-batch = batch),
no KL, lr 1e-6, vLLM colocated at gpu_memory_utilization 0.3, 5 steps, median of steps 2-5.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_proc import GpuMemory, free_gpu, run_logged  # noqa: E402
from verl_log import first_error, parse_steps, summarize, table, trl_result  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = Path("/tmp/verl_bench")  # verl_data.py writes the model, parquet files and reward there
STEPS = 5


def workload(root: Path, steps: int) -> list[str]:
    """Overrides every setting shares: the workload and what makes verl 0.9.1 run on this machine."""
    return [
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=False",
        f"data.train_files={root}/train.parquet",
        f"data.val_files={root}/val.parquet",
        "data.train_batch_size=32",
        "data.max_prompt_length=256",
        "data.max_response_length=256",
        "data.filter_overlong_prompts=False",
        "data.truncation=error",
        "data.shuffle=False",
        f"actor_rollout_ref.model.path={root}/model",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # flash-attn is not installed
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.ref.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",  # x rollout.n = 256 sequences: one optimizer step
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.3",
        "actor_rollout_ref.rollout.ignore_eos=True",
        # 0.9 reads the reward function from reward.*; the top-level custom_reward_function is ignored
        f"reward.custom_reward_function.path={root}/reward.py",
        "reward.custom_reward_function.name=compute_score",
        "trainer.logger=console",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
        f"trainer.total_training_steps={steps}",
        "trainer.save_freq=-1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.project_name=rrl_sbs",
        "trainer.experiment_name=verl_qwen",
    ]


@dataclass(frozen=True)
class Setting:
    """One verl configuration tried: what it changes (said in words for the results table) and how."""

    summary: str
    overrides: tuple[str, ...]


_MICRO32 = (
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32",
)
# verl's perf guide: no gradient checkpointing when memory allows, dynamic batch size with a token budget of at
# least 2x (prompt + response) per micro-batch, larger for forward-only log-prob passes. Remove-padding off:
# without flash-attn, transformers runs SDPA over the packed micro-batch with a dense block-causal mask
# (quadratic in the packed length); padded rows use the fused causal kernels.
_TUNED = (
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.use_dynamic_bsz=True",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24576",  # as ours: 64 x 384 tokens per micro-batch
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=49152",
)
# Without flash-attn, verl's log-probs fall back to logprobs_from_logits_v2: a Python loop of log_softmax over
# every token row (bf16 logits). verl's fused linear + log-prob kernel (torch backend, 512-token chunks) avoids
# both that loop and the full logits. Then work neither ours nor TRL does here: keep vLLM awake during the update
# (both run so) and take the rollout's own log-probs as the old policy's instead of a second forward pass
# (verl's documented bypass mode; ours and TRL use the policy's detached log-probs, one update per batch).
_LEAN = (
    "actor_rollout_ref.model.use_fused_kernels=True",
    "actor_rollout_ref.model.fused_kernel_options.impl_backend=torch",
    "actor_rollout_ref.rollout.free_cache_engine=False",
    "algorithm.rollout_correction.bypass_mode=True",
)
_FAST_POLL = (
    f"trainer.v1.sampler.custom_sampler.path={HERE}/verl_fast_poll.py",
    "trainer.v1.sampler.custom_sampler.name=FastPollReplayBuffer",
)
SETTINGS: dict[str, Setting] = {
    "defaults": Setting(
        "verl defaults: gradient checkpointing on, remove-padding on, micro-batch 32", _MICRO32
    ),
    "S1": Setting(
        "gradient checkpointing off, remove-padding off, dynamic batch size (24k tokens per "
        "micro-batch, 48k for log-probs)",
        _TUNED,
    ),
    "S2": Setting(
        "S1 + fused linear/log-prob kernels + vLLM kept awake (free_cache_engine=False) + bypass mode "
        "(old log-probs = rollout's)",
        _TUNED + _LEAN,
    ),
    "S3": Setting(
        "S2 + replay buffer polled every 0.05 s instead of verl's fixed 2 s (a custom sampler, "
        "verl_fast_poll.py)",
        _TUNED + _LEAN + _FAST_POLL,
    ),
    "S2_rmpad": Setting(
        "S2 with remove-padding on (packed micro-batches, dense block mask without flash-attn)",
        tuple(o.replace("use_remove_padding=False", "use_remove_padding=True") for o in _TUNED + _LEAN),
    ),
}


def overrides(name: str, root: Path = ROOT, steps: int = STEPS) -> list[str]:
    if name not in SETTINGS:
        raise SystemExit(f"verl_runs: unknown setting {name!r}; known: {', '.join(SETTINGS)}")
    return workload(root, steps) + list(SETTINGS[name].overrides)


VLLM_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "PYTHONUNBUFFERED": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def env_for(system: str) -> dict[str, str]:
    """Each system's own site: verl's wheels (/tmp/vsite) never mix with ours/TRL's (/tmp/site)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VLLM_ENABLE_V1_MULTIPROCESSING")}
    env.update(VLLM_ENV)
    if system == "verl":
        env.update(PYTHONPATH="/tmp/vsite:/tmp/vllm_kit/site", RAY_DEDUP_LOGS="0")
    else:  # what the earlier side-by-side ran under (vllm_kit install.sh exports these)
        env.update(
            PYTHONPATH=f"/tmp/site:{HERE.parent.parent}:/tmp/vllm_kit/site",
            VLLM_ENABLE_V1_MULTIPROCESSING="0",
        )
    return env


def run_verl(name: str, out_dir: Path, timeout: float, steps: int = STEPS) -> dict[str, Any]:
    log = out_dir / f"verl_{name}.log"
    cmd = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        *overrides(name, ROOT, steps),
        f"hydra.run.dir=/tmp/verl_hydra/{name}",
    ]
    with GpuMemory() as mem:
        rc, wall = run_logged(cmd, env_for("verl"), log, timeout)
    killed = free_gpu()
    text = log.read_text(errors="replace")
    res: dict[str, Any] = {
        "system": "verl",
        "setting": name,
        "summary": SETTINGS[name].summary,
        "overrides": list(SETTINGS[name].overrides),
        "rc": rc,
        "wall_s": wall,
        "gpu_peak_gib": mem.peak_gib(),
        "killed_pids": killed,
        **summarize(parse_steps(text)),
    }
    res["complete"] = rc == 0 and res["steps_parsed"] == steps
    if rc is None:
        res["error"] = (
            f"stopped at the call's budget ({timeout:.0f} s) after {res['steps_parsed']} of {steps} steps"
        )
    elif not res["complete"]:
        res["error"] = first_error(text) or text[-1500:]
    print(
        f"verl {name}: rc={rc} wall={wall}s steps={res['steps_parsed']} "
        f"step={res.get('step_s_median')} tok/s={res.get('tokens_per_s')}",
        flush=True,
    )
    return res


# ---------------------------------------------------------------- phases


def sweep(names: list[str], budget: float, out_dir: Path) -> None:
    """Each setting in turn while the call's budget lasts; a run starts only if the last one's wall time fits."""
    deadline = time.time() + budget
    results, estimate = [], float(os.environ.get("VERL_FIRST_RUN_S", 240))
    for name in names:
        left = deadline - time.time()
        if left < estimate:
            results.append(
                {
                    "system": "verl",
                    "setting": name,
                    "skipped": f"{left:.0f} s left, a run needs ~{estimate:.0f} s",
                }
            )
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
    cmd = [
        sys.executable,
        str(HERE / "side_by_side.py"),
        "qwen",
        "--steps",
        str(STEPS - 1),
        "--only-ours",
        "--out",
        str(out),
    ]
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
    res = trl_result((out_dir / "trl.log").read_text(errors="replace"))
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
            runs.append(
                {"system": "verl", "setting": name, "skipped": f"{deadline - time.time():.0f} s left"}
            )
            continue
        runs.append(run_verl(name, out_dir, deadline - time.time() - 5))
    result["verl_runs"] = runs
    done = [r for r in runs if r.get("step_s_median")]
    result["verl"] = min(done, key=lambda r: r["step_s_median"]) if done else runs[0]
    for peer in ("verl", "trl"):
        if result[peer].get("tokens_per_s") and result["ours"].get("tokens_per_s"):
            result[f"ratio_ours_over_{peer}"] = round(
                result["ours"]["tokens_per_s"] / result[peer]["tokens_per_s"], 2
            )
    (out_dir / "compare.json").write_text(json.dumps(result, indent=1, default=str))
    print(table(result), flush=True)


def pair(setting: str, budget: float, out_dir: Path) -> None:
    """Ours, then one verl setting, in one call (a call has no room for TRL besides a whole verl run)."""
    deadline = time.time() + budget
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result["ours"] = run_ours(out_dir, min(220.0, deadline - time.time()))
    result["verl"] = run_verl(setting, out_dir, deadline - time.time() - 5)
    if result["verl"].get("tokens_per_s") and result["ours"].get("tokens_per_s"):
        result["ratio_ours_over_verl"] = round(
            result["ours"]["tokens_per_s"] / result["verl"]["tokens_per_s"], 2
        )
    (out_dir / "pair.json").write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps({k: result[k] for k in ("ratio_ours_over_verl",) if k in result}), flush=True)


def rebuild(result_json: Path) -> None:
    """Re-derive every log-parsed field of a compare/sweep JSON from the logs beside it (after a parser fix),
    keeping what only the run itself knew (rc, wall time, GPU peak)."""
    data = json.loads(result_json.read_text())
    logs = result_json.parent

    def redo(run: dict[str, Any]) -> dict[str, Any]:
        if run.get("system") == "verl" and (logs / f"verl_{run.get('setting')}.log").is_file():
            run.update(
                summarize(parse_steps((logs / f"verl_{run['setting']}.log").read_text(errors="replace")))
            )
            if run.get("rc") is None:
                run["error"] = f"stopped at the call's budget after {run['steps_parsed']} of {STEPS} steps"
        elif run.get("system") == "trl" and (logs / "trl.log").is_file():
            run.update(trl_result((logs / "trl.log").read_text(errors="replace")))
            if "step_s_median" in run:
                run.pop("error", None)
        return run

    if isinstance(data, list):  # a sweep
        data = [redo(r) for r in data]
    else:
        for key in ("ours", "trl", "verl"):
            if key in data:
                data[key] = redo(data[key])
        data["verl_runs"] = [redo(r) for r in data.get("verl_runs", [])]
        for peer in ("verl", "trl"):
            if data.get(peer, {}).get("tokens_per_s") and data.get("ours", {}).get("tokens_per_s"):
                data[f"ratio_ours_over_{peer}"] = round(
                    data["ours"]["tokens_per_s"] / data[peer]["tokens_per_s"], 2
                )
    result_json.write_text(json.dumps(data, indent=1, default=str))
    if isinstance(data, dict) and "ours" in data and "trl" in data and "verl" in data:
        print(table(data))


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
            print(
                f"{name}: ok  gc={m.enable_gradient_checkpointing} rmpad={m.use_remove_padding} "
                f"dyn_bsz={a.use_dynamic_bsz} tok={a.ppo_max_token_len_per_gpu}/{ro.log_prob_max_token_len_per_gpu} "
                f"micro={a.ppo_micro_batch_size_per_gpu} fused={m.use_fused_kernels} free_cache={ro.free_cache_engine} "
                f"bypass={cfg.algorithm.rollout_correction.bypass_mode} sampler={sampler.name} "
                f"mini={a.ppo_mini_batch_size} n={ro.n} ignore_eos={ro.ignore_eos} steps={cfg.trainer.total_training_steps}"
            )


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
    k.add_argument(
        "--extra", nargs="*", default=[], help="settings to run after the comparison if time is left"
    )
    q = sub.add_parser("pair", help="ours, then one verl setting, in one call")
    q.add_argument("setting")
    q.add_argument("--budget", type=float, required=True)
    q.add_argument("--out-dir", type=Path, required=True)
    b = sub.add_parser(
        "rebuild", help="re-parse the logs beside a sweep.json/compare.json (after a parser fix)"
    )
    b.add_argument("json", type=Path)
    args = ap.parse_args()
    if args.phase == "check":
        check(args.names, args.root)
        return
    if args.phase == "rebuild":
        rebuild(args.json)
        return
    for name in getattr(args, "names", []) + getattr(args, "extra", []):
        overrides(name)  # unknown names fail before any run
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.phase == "sweep":
        sweep(args.names, args.budget, args.out_dir)
    elif args.phase == "pair":
        overrides(args.setting)
        pair(args.setting, args.budget, args.out_dir)
    else:
        compare(args.sweep, args.trl, args.budget, args.out_dir, args.extra)


if __name__ == "__main__":
    main()
