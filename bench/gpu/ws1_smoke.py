"""Issue 21 on one GPU: `rrl train` through the worker-group trainer at world size 1 (FSDP2 over an NCCL group
of one, sharded checkpoint, resume), a tiny random model and the hf engine (no vLLM on that machine unless its kit
travels). Prints one table; writes the run's trace summary to --out. Also runs here on CPU (gloo) as a check."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import yaml


def run(cfg: Path, *extra: str) -> float:
    start = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "reasoning_rl.cli", "train", str(cfg), *extra], capture_output=True, text=True
    )
    if proc.returncode:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        raise SystemExit(f"rrl train failed ({proc.returncode})")
    return time.time() - start


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/ws1"))
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch

    from reasoning_rl.tiny import build_tiny_model

    model = build_tiny_model(args.work / "model", hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2)
    cfg = {
        "run": {
            "name": "ws1",
            "dir": str(args.work / "run"),
            "doctor": False,
            "seed": 0,
            "device": args.device,
        },
        "model": {"path": str(model), "fsdp": "on", "compile": False},
        "data": {"train": {"generator": "arithmetic", "size": 256}},
        "rollout": {"engine": "hf", "n": 8, "max_tokens": 16, "temperature": 1.0},
        "trainer": {"steps": 4, "batch_size": 16, "export": False, "checkpoint_every": 2, "overwrite": True},
        "logging": {"tensorboard": False},
    }
    path = args.work / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    first = run(path, "trainer.steps=2")
    resumed = run(path, "trainer.resume=auto")
    records = [json.loads(x) for x in (args.work / "run" / "trace.jsonl").read_text().splitlines()]
    meta = next((r for r in records if r.get("type") == "meta"), {})
    metrics = [json.loads(x) for x in (args.work / "run" / "metrics.jsonl").read_text().splitlines()]
    comm = [r for r in records if r.get("name") == "comm_bytes"]
    ckpt = sorted(p.name for p in (args.work / "run" / "checkpoints").iterdir())
    shards = sorted(str(p.relative_to(args.work / "run")) for p in (args.work / "run").rglob("*.distcp"))
    summary = {
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
        "backend": "nccl" if args.device == "cuda" else "gloo",
        "world_size": meta.get("world_size"),
        "wall_s": {"steps_1_2": round(first, 1), "resume_steps_3_4": round(resumed, 1)},
        "steps": [
            {k: m.get(k) for k in ("step", "reward/mean", "policy/loss", "time/step_s", "handoff/bytes")}
            for m in metrics
        ],
        "comm_bytes": [{"step": r.get("step"), **r.get("attrs", {}), "value": r.get("value")} for r in comm],
        "checkpoints": ckpt,
        "shards": shards,
    }
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"{'step':>4} {'reward':>8} {'loss':>10} {'step_s':>7} {'handoff_MB':>10}")
    for s in summary["steps"]:
        print(
            f"{s['step']:>4} {s['reward/mean']:>8.3f} {s['policy/loss']:>10.5f} {s['time/step_s']:>7.2f} "
            f"{(s['handoff/bytes'] or 0) / 1e6:>10.1f}"
        )
    print(
        json.dumps(
            {k: summary[k] for k in ("device", "backend", "world_size", "wall_s", "checkpoints", "shards")}
        )
    )


if __name__ == "__main__":
    main()
