"""The tool run whose result issue 43 recorded on the streamed-wave path (tests/assets/
recorded_tools_eval_issue43.json) and that the frontier must reproduce: GRPO with the scripted TIR policy and
the deterministic arithmetic tool (no sandbox), 3 steps, then ``rrl eval`` of the same config. ``record``
returns what is compared: each step's samples (response, verdict, tool turns) and reward, and the eval rows
and metrics (and a single-turn eval on the hf engine). Recording: ``PYTHONPATH=.:tests/tools python -m tools_record tests/assets/...json``."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from reasoning_rl.config import Config, load_config

ASSET = Path(__file__).resolve().parents[1] / "assets" / "recorded_tools_eval_issue43.json"


def tool_config(tmp: Path, model: Path, name: str, **sections: Any) -> Config:
    import tir_engine  # noqa: F401 - registers rollout.engine=scripted_tir

    base: dict[str, Any] = {
        "run": {"name": name, "dir": str(tmp / name), "doctor": False, "seed": 3, "device": "cpu"},
        "model": {"path": str(model)},
        "data": {"train": {"generator": "arithmetic", "size": 16}, "chat_template": False},
        "rollout": {
            "engine": "scripted_tir",
            "n": 4,
            "max_tokens": 160,
            "freshness_check": False,
            "tools": ["arith_tool:ArithTool"],
            "tool_format": "hermes",
            "max_turns": 2,
        },
        "algorithm": {"old_logprobs": "recompute"},
        "optim": {"lr": 0.001},
        "trainer": {"steps": 3, "batch_size": 2, "export": False},
        "eval": {"n": 2, "max_prompts": 3, "temperature": 1.0},
        "grading": {"workers": 1, "cache": False, "selftest": False},
        "logging": {"console": "none", "tensorboard": False},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value}
    return load_config(None, base=base)


def sample_key(row: dict[str, Any]) -> list[Any]:
    """What a trained sample must reproduce (tool latency is wall time: left out)."""
    turns = [[t["tool"], t["arguments"], t["status"], t["output"]] for t in row.get("turns", [])]
    return [row["id"], row["sample"], row["response"], row["verdict"], row["finish_reason"], turns]


def steps_of(run: Path) -> dict[str, Any]:
    samples = {
        p.stem: sorted(sample_key(json.loads(line)) for line in p.read_text().splitlines())
        for p in sorted((run / "samples").glob("step_*.jsonl"))
    }
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["reward/mean"] for m in metrics if "reward/mean" in m]
    return {"samples": samples, "rewards": rewards}


def eval_of(cfg: Config, out: Path) -> dict[str, Any]:
    from reasoning_rl.trainer.eval import run_eval

    result, path = run_eval(cfg, out=out, console=Console(quiet=True))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    responses = [[r["id"], [[s["text"], s["verdict"]] for s in r["responses"]]] for r in rows]
    return {"metrics": result.metrics, "rows": responses}


def record(tmp: Path, model: Path, **sections: Any) -> dict[str, Any]:
    from reasoning_rl.trainer.loop import Trainer

    cfg = tool_config(tmp, model, "tools", **sections)
    Trainer(cfg, console=Console(quiet=True)).run()
    # single-turn eval on the hf engine (streamed before, through a frontier now)
    hf = tool_config(tmp, model, "hf", rollout={"engine": "hf", "tools": [], "max_tokens": 8})
    return {
        "train": steps_of(cfg.run_dir),
        "eval": eval_of(cfg, tmp / "eval.jsonl"),
        "eval_hf": eval_of(hf, tmp / "eval_hf.jsonl"),
    }


if __name__ == "__main__":
    from reasoning_rl.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as d:
        got = record(Path(d), build_tiny_model(Path(d) / "model"))
    Path(sys.argv[1]).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
