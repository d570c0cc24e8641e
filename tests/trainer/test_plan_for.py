"""``rrl train CONFIG --dry-run --plan-for TARGET`` (issue 47: planning for a machine you are not on): the memory
plan and the largest micro-batch for the target's GPUs, made on this CPU machine; an unknown target refused in
one line naming the known ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

from typer.testing import CliRunner

from reasoning_rl.cli.app import app
from reasoning_rl.config import Config
from reasoning_rl.doctor_checks.memory import config_plan
from reasoning_rl.memory_plan.shapes import ModelShape
from reasoning_rl.memory_plan.targets import TARGETS, find_target
from reasoning_rl.model_shapes import QWEN25_1_5B
from tests.trainer.test_dry_run_checks import _cfg

runner = CliRunner()


def _qwen15(tmp_path: Path) -> Config:
    """A config whose model dir holds only the Qwen2.5-1.5B shape's config.json (what the plan reads)."""
    model = tmp_path / "qwen15"
    model.mkdir()
    conf = dict(QWEN25_1_5B, model_type="qwen2", max_position_embeddings=32768)
    (model / "config.json").write_text(json.dumps(conf))
    return Config.model_validate(
        {"model": {"path": str(model)}, "data": {"train": "x.jsonl"}, "rollout": {"max_tokens": 4096}}
    )


def test_h200x8_shards_what_h200_keeps_whole(tmp_path: Path) -> None:
    """Eight training ranks share the FSDP2 shards: fp32 params, gradients and AdamW moments are 1/8 per rank
    (rounded up) on h200x8, on the same 139 GiB device as h200, so more tokens fit in a micro-batch."""
    cfg = _qwen15(tmp_path)
    params = ModelShape.from_model_dir(cfg.model.path).params
    one = config_plan(cfg, 4608, find_target("h200"))
    eight = config_plan(cfg, 4608, find_target("h200x8"))
    assert one.capacity == eight.capacity == TARGETS["h200"].gpu.memory
    for plan, world in ((one, 1), (eight, 8)):
        share = math.ceil(params / world)
        assert plan.update["params"] == 4 * share  # fp32 masters under FSDP2 on CUDA
        assert plan.update["optimizer"] == 8 * share  # two fp32 moments
        assert plan.fits and plan.engine is not None  # vLLM sized on the target (auto is vLLM on GPUs)
    assert eight.largest > one.largest > 0


def test_the_dry_run_prints_the_targets_plan_from_this_machine(tmp_path: Path, tiny_model_dir: Path) -> None:
    res = runner.invoke(
        app, ["train", str(_cfg(tmp_path, tiny_model_dir)), "--dry-run", "--plan-for", "h200x8"]
    )
    assert res.exit_code == 0, res.output
    out = " ".join(res.stdout.split())
    assert "planning for h200x8: 8 x NVIDIA H200 per node" in out
    assert "resources: 1 node(s) x 8 rank(s) on cuda (request accepted)" in out
    assert "usable 126.9 GiB of 139.0 GiB" in out  # the target's device, not this machine's memory
    assert "largest micro-batch on h200x8: micro_batch_tokens=" in out
    assert "doctor: not run" in out and "dry run ok" in out


def test_an_unknown_target_is_refused_in_one_line_naming_the_known_ones(tmp_path: Path) -> None:
    cfg = str(tmp_path / "never_read.yaml")
    res = runner.invoke(app, ["train", cfg, "--dry-run", "--plan-for", "h300"])
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1, res.output
    assert "--plan-for 'h300': unknown target; known: h200, h200x2, h200x4, h200x8" in res.stderr
    assert "a100-80gx8" in res.stderr
    res = runner.invoke(app, ["train", cfg, "--plan-for", "h200"])
    assert res.exit_code == 2 and "add --dry-run" in res.stderr, res.output
