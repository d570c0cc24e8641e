"""The memory plan of the whole step (issue 45): generation (the engine's share beside the trainer's states),
the weight hand-off (its buckets), the update and the log-prob passes; a share of the device that leaves the
trainer no room refused in one line with the share that fits or sleep mode; vLLM's KV cache given in bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from reasoning_rl.config import Config  # noqa: E402
from reasoning_rl.memory_plan.plan import MemoryPlan, plan_run  # noqa: E402
from reasoning_rl.memory_plan.shapes import ModelShape, gib  # noqa: E402
from tests.rl.test_memory_plan import H200, QWEN15, tiny_config  # noqa: E402

RUN: dict[str, Any] = dict(
    device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=8704, engine=True
)


def plan(tmp_path: Path, **rollout: Any) -> tuple[MemoryPlan, Config, ModelShape]:
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": 8192, **rollout}, trainer={"batch_size": 8}
    )
    return plan_run(cfg, shape, **RUN), cfg, shape


def most(problem: str | None) -> float:
    assert problem is not None and "\n" not in problem
    return float(problem.split("rollout.gpu_memory_utilization<=")[1].split()[0])


def test_a_share_that_leaves_the_trainer_no_room_is_refused_with_the_share_that_fits(tmp_path: Path) -> None:
    """Sleep mode on: vLLM's 0.9 of an H200 (125 GiB) and the trainer's fp32 states (17 GiB) cannot both be on
    the device while it generates. Before: the dry run passed (only the update, with vLLM asleep, was checked)."""
    refused, _, _ = plan(tmp_path, gpu_memory_utilization=0.9)
    assert refused.problem is not None
    assert refused.problem.startswith("memory plan: vLLM holds 125.1 GiB of the device")
    assert (
        "(rollout.gpu_memory_utilization=0.9)" in refused.problem and "during generation" in refused.problem
    )
    share = most(refused.problem)
    ok, _, _ = plan(tmp_path, gpu_memory_utilization=share)
    assert ok.fits and ok.peak <= ok.usable
    assert not plan(tmp_path, gpu_memory_utilization=share + 0.002)[0].fits


def test_an_engine_awake_through_the_update_names_the_share_or_sleep(tmp_path: Path) -> None:
    """rollout.sleep=false: the share must leave the update one sequence; before, a 0.9 share got "even with
    every memory switch: lower rollout.max_tokens", and a 0.6 share the offload switches, not the engine."""
    awake, _, _ = plan(tmp_path, gpu_memory_utilization=0.9, sleep=False)
    assert "in the update (rollout.sleep=false keeps it awake)" in str(awake.problem)
    assert plan(tmp_path, gpu_memory_utilization=most(awake.problem), sleep=False)[0].fits
    half, _, _ = plan(tmp_path, gpu_memory_utilization=0.6, sleep=False)
    assert half.problem is not None and " or set rollout.sleep=true" in half.problem
    assert plan(tmp_path, gpu_memory_utilization=0.6, sleep=True)[0].fits


def test_the_step_is_planned_phase_by_phase(tmp_path: Path) -> None:
    """Generation holds the trainer's states and the engine's share; the hand-off adds one bucket in bf16 and the
    largest tensor (the embedding) gathered in fp32; the step's peak is the largest phase."""
    from reasoning_rl.memory_plan.engine import handoff_bytes

    p, cfg, shape = plan(tmp_path)
    assert p.fits and p.engine is not None
    held = p.engine.held(H200)
    kept = p.update["params"] + p.update["optimizer"]  # no gradients between passes
    embedding = shape.vocab * shape.hidden
    assert p.buckets == handoff_bytes(shape, 256 << 20, 2, 4) == 2 * embedding + 4 * embedding
    assert p.phases == {
        "generation": kept + held,
        "hand-off": kept + held + p.buckets,
        "update": p.update_peak,
        "log-prob passes": p.logprob,
    }
    assert p.peak == max(p.phases.values()) <= p.usable
    assert p.lines()[0].startswith(
        f"step peak 126.8 GiB in the update: generation {gib(kept + held)} (trainer"
    )
    big, _, _ = plan(tmp_path, handoff_bucket_mb=4096)
    assert big.buckets == (4096 << 20) + 4 * embedding


def test_a_planned_engine_leaves_room_for_the_hand_off(tmp_path: Path) -> None:
    """An engine whose KV cache fills what the trainer leaves (long responses): its share, rounded up, and the
    hand-off's buckets still fit beside the trainer."""
    long = {"max_tokens": 120_000}
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout=long, trainer={"batch_size": 64}, model={"gradient_checkpointing": True}
    )
    p = plan_run(cfg, shape, **{**RUN, "max_model_len": 120_512})
    assert p.engine is not None and p.engine.max_num_seqs < p.engine.wanted_seqs  # limited by the room left
    assert p.fits and p.phases["hand-off"] <= p.usable


def test_the_plan_sizes_vllm_s_kv_cache_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """engine_for on CUDA passes the plan's KV bytes (vLLM 0.24's kv_cache_memory_bytes) beside its share; a share
    the config fixes sizes the KV cache instead, and the user's own engine_args win."""
    from reasoning_rl import factory

    made: list[dict[str, Any]] = []
    monkeypatch.setattr(factory, "device_capacity", lambda device: H200)
    monkeypatch.setattr(factory, "rollout_kind", lambda cfg: "vllm")
    monkeypatch.setattr(factory, "make_engine", lambda kind, path, **kw: made.append(kw) or kw)
    p, cfg, _ = plan(tmp_path)
    factory.engine_for(cfg, Path(cfg.model.path), "cuda", 8704, dtype="bfloat16")
    assert p.engine is not None and made[-1]["kv_cache_memory_bytes"] == p.engine.kv
    _, fixed, _ = plan(tmp_path, gpu_memory_utilization=0.3)
    factory.engine_for(fixed, Path(cfg.model.path), "cuda", 8704, dtype="bfloat16")
    assert "kv_cache_memory_bytes" not in made[-1] and made[-1]["gpu_memory_utilization"] == 0.3
    _, own, _ = plan(tmp_path, engine_args={"kv_cache_memory_bytes": 1 << 30})
    factory.engine_for(own, Path(cfg.model.path), "cuda", 8704, dtype="bfloat16")
    assert made[-1]["kv_cache_memory_bytes"] == 1 << 30
    factory.engine_for(cfg, Path(cfg.model.path), "cpu", 8704, dtype="float32")
    assert "kv_cache_memory_bytes" not in made[-1]


def test_the_dry_run_for_an_h200_refuses_the_share_in_one_line(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rrl train examples/qwen15_grpo/config.yaml --dry-run --plan-for h200`: the step's peak printed; with
    rollout.gpu_memory_utilization=0.9 refused in one line naming the field and the share that fits."""
    from typer.testing import CliRunner

    from reasoning_rl.cli.app import app
    from tests.trainer.test_example_h200_plans import REPO, shape_dir

    monkeypatch.chdir(REPO)
    model = shape_dir("QWEN25_1_5B", tiny_model_dir, tmp_path / "model")
    args = ["train", "examples/qwen15_grpo/config.yaml", "--dry-run", "--plan-for", "h200"]
    args += [f"model.path={model}", f"run.dir={tmp_path / 'run'}"]
    runner = CliRunner()
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert "memory plan: step peak " in ok.stdout and "dry run ok" in ok.stdout
    res = runner.invoke(app, [*args, "rollout.gpu_memory_utilization=0.9"])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "(rollout.gpu_memory_utilization=0.9)" in res.stderr
    assert "set rollout.gpu_memory_utilization<=0." in res.stderr


def test_a_planned_engine_awake_through_the_update_leaves_it_one_sequence(tmp_path: Path) -> None:
    """rollout.sleep=false, share unset: the engine's KV cache is sized to what the update leaves (fewer sequences
    at once than the step wants), not to what generation leaves. Before: 437 sequences of KV and a refusal."""
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": 8192, "sleep": False}, trainer={"batch_size": 64}
    )
    p = plan_run(cfg, shape, **RUN)
    assert p.fits, p.problem
    assert p.engine is not None and 0 < p.engine.max_num_seqs < p.engine.wanted_seqs
    assert p.micro_batch_tokens >= 8704 and p.peak <= p.usable
