"""Every training rank runs its own vLLM engine (data-parallel rollout); run under torchrun.

After one FSDP2 step and ``push_weights`` each rank's engine must score fixed sequences like the
trainer (and differ before the hand-off). Prints one JSON line per rank for the test to read.
"""

from __future__ import annotations

import gc
import json
import os
import sys

import torch

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

from reasoning_rl import dist  # noqa: E402
from reasoning_rl.algorithms import LossConfig  # noqa: E402
from reasoning_rl.handoff import push_weights  # noqa: E402
from reasoning_rl.policy import Policy, TokenBatch  # noqa: E402
from reasoning_rl.rollout import make_engine  # noqa: E402


def main(model_dir: str) -> None:
    dist.init()
    policy = Policy.from_pretrained(model_dir, lr=3e-2)
    engine = make_engine("vllm", model_dir, max_model_len=128, kv_cache_memory_bytes=64 << 20)
    g = torch.Generator().manual_seed(dist.rank())
    fixed = TokenBatch([torch.randint(7, 90, (12,), generator=g) for _ in range(3)], [5, 6, 7])
    seqs = [s.tolist() for s in fixed.sequences]
    old, _ = policy.logprobs(fixed)
    for _ in range(2):
        policy.train_step(fixed, torch.tensor([1.0, -1.0, 0.5]), old, None, LossConfig())
    want, _ = policy.logprobs(fixed)

    before = _gap(engine, seqs, fixed.prompt_lens, want)
    stats = push_weights(policy, engine, version=1)  # after one update
    after = _gap(engine, seqs, fixed.prompt_lens, want)
    # One write per line: with PYTHONUNBUFFERED, print() writes text and newline separately and the two ranks'
    # lines can interleave on the shared stdout.
    row = json.dumps({"rank": dist.rank(), "before": before, "after": after, "tensors": stats.tensors})
    sys.stdout.write(row + "\n")
    sys.stdout.flush()
    del engine
    gc.collect()  # vLLM tears down its groups while the default group still exists
    dist.barrier()


def _gap(engine: object, seqs: list[list[int]], plens: list[int], want: torch.Tensor) -> float:
    got = engine.score(seqs, plens)  # type: ignore[attr-defined]
    return max(abs(x - float(want[i, k])) for i, row in enumerate(got) for k, x in enumerate(row))


if __name__ == "__main__":
    main(sys.argv[1])
