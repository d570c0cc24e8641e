"""Issue 42: the anchor's weight hand-off and freshness check alone, each way the engine can take weights.

    python bench/gpu/handoff.py --out OUT.json [--shape qwen] [--rounds 5]

Builds the anchor's components as ``rrl train`` does (``side_by_side.anchor_config``: Qwen2-0.5B shape, bf16,
vLLM in process), then, ``--rounds`` times and interleaved, times on rank 0's own policy and engine:

- ``handoff:<path>``: ``push_weights`` without the gate, the engine taking the weights by ``path``: ``in_place``
  (the model's loader copying straight into vLLM's tensors, what a CUDA engine does since this issue) or
  ``reload`` (vLLM's layer-wise ``reload_weights``, what it did before, and what a pre-packed CPU engine does);
- ``handoff+check:<path>``: the hand-off as the step runs it (freshness gate included);
- ``fingerprints:grouped`` / ``fingerprints:per_tensor``: the sent side's fingerprints of the full weights in the
  engine's dtype, tensors of one shape reduced together or one by one (``SentFingerprints(flush_bytes=1)``);
- ``engine_fingerprints``: the engine's read-back of its own weights (the gate's other side).

Every run is ``{"name", "steps_s", "tokens"}`` with the BYTES handed off as ``tokens`` (``workload.unit``), so
``python bench/gpu/throughput.py OUT.json`` gives bytes per second. On CPU (tiny shape) vLLM pre-packs its weights
and only ``reload`` runs (the script's check before a GPU call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput  # noqa: E402
from floors import rank0, sync  # noqa: E402
from side_by_side import anchor_config  # noqa: E402


def timed(fn: Any) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def measure(shape: str, rounds: int, work: Path) -> dict[str, Any]:
    from rich.console import Console

    from reasoning_rl.handoff import push_weights
    from reasoning_rl.rollout.fingerprints import SentFingerprints
    from reasoning_rl.trainer.build import build_components

    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cfg = anchor_config(shape, 1, work)
    parts = build_components(cfg, cfg.run_dir, console=Console())
    try:
        policy, engine = rank0(parts)
        in_place = bool(engine.loads_in_place)
        paths = ["in_place", "reload"] if in_place else ["reload"]
        dtype = getattr(torch, cfg.model.dtype)
        named = [(n, t) for bucket in policy.iter_full_params(256 << 20, dtype) for n, t in bucket]
        nbytes = sum(t.numel() * t.element_size() for _, t in named)

        def fingerprints(flush: int) -> None:
            sent = SentFingerprints(dtype, flush_bytes=flush)
            for name, t in named:
                sent.observe(name, t)
            sent.result()

        push_weights(
            policy, engine, version=0
        )  # warm-up of both paths and of the gate (no update: version 0)
        parts.push_weights(version=0, trace=None)
        times: dict[str, list[float]] = {}
        for _ in range(rounds):
            for path in paths:
                engine.loads_in_place = path == "in_place"
                times.setdefault(f"handoff:{path}", []).append(
                    timed(lambda: push_weights(policy, engine, version=0))
                )
                times.setdefault(f"handoff+check:{path}", []).append(
                    timed(lambda: parts.push_weights(version=0, trace=None))
                )
            engine.loads_in_place = in_place
            times.setdefault("fingerprints:grouped", []).append(timed(lambda: fingerprints(256 << 20)))
            times.setdefault("fingerprints:per_tensor", []).append(timed(lambda: fingerprints(1)))
            times.setdefault("engine_fingerprints", []).append(timed(engine.weight_fingerprints))
    finally:
        parts.close()
    runs = [
        {"name": k, "steps_s": [round(s, 5) for s in v], "tokens": [nbytes] * len(v)}
        for k, v in times.items()
    ]
    workload = {
        "name": "handoff",
        "shape": shape,
        "unit": "bytes",
        "dtype": cfg.model.dtype,
        "tensors": len(named),
        "bytes": nbytes,
        "engine_copies_in_place": in_place,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    }
    return throughput.result(workload, runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="qwen")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/rrl_handoff"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    out = measure(args.shape, args.rounds, args.work)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for run in out["runs"]:
        s = sorted(run["steps_s"])
        print(f"HANDOFF {run['name']:28s} median {s[len(s) // 2] * 1e3:8.1f} ms  (min {s[0] * 1e3:.1f})")


if __name__ == "__main__":
    main()
