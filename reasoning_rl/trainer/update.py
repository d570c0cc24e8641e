"""The update on a TrainBatch: ``algorithm.epochs`` passes over mini-batches, each one policy optimizer step
(and one critic step for PPO). The loss itself is ``algorithms.policy_loss``, inside ``Policy.train_step``.
Progress (the heartbeat's): the micro-batch under way of the policy's (``micro-batch``) or critic's (``critic
micro-batch``) step, and the ``mini-batch`` where there are several (the default, one, would always say 1/1)."""

from __future__ import annotations

import torch

from reasoning_rl.factory import Models
from reasoning_rl.faults import fault_point
from reasoning_rl.trace import Counts, Progress, TraceWriter
from reasoning_rl.trainer.plan import StepPlan
from reasoning_rl.trainer.records import TrainBatch


def update(
    models: Models, batch: TrainBatch | None, plan: StepPlan, *, trace: TraceWriter, step: int
) -> dict[str, float]:
    """Train on ``batch``; the mean of each optimizer step's metrics (``policy/*``, ``critic/*``)."""
    if batch is None:
        return {"update/skipped": 1.0}
    a = plan.algorithm
    n = len(batch)
    size = min(a.mini_batch_size or n, n)
    stats: dict[str, list[float]] = {}
    per_epoch = -(-n // size)
    total = a.epochs * per_epoch
    with trace.span("update", step) as attrs:
        for epoch in range(a.epochs):
            order = torch.randperm(n).tolist() if epoch and a.epochs > 1 else list(range(n))
            for start in range(0, n, size):
                # the mini-batch where there are several; each train step adds its micro-batch k/K
                at: Counts = (
                    {"mini-batch": (epoch * per_epoch + start // size + 1, total)} if total > 1 else {}
                )
                trace.progress("update", **at)
                mini = batch.select(order[start : start + size])
                m = models.policy.train_step(
                    mini.tokens,
                    mini.advantages,
                    mini.old_logprobs,
                    mini.ref_logprobs,
                    a,
                    max_response_len=plan.max_tokens,
                    token_weights=mini.correction_weights,
                    progress=_counting(trace, at, "micro-batch"),
                )
                _add(stats, "policy", m)
                fault_point("update")  # a crash test's mid-update: the policy moved, nothing saved
                if models.critic is not None:
                    assert mini.returns is not None and mini.values is not None  # GAE filled them
                    critic = models.critic.train_step(
                        mini.tokens,
                        mini.returns,
                        mini.values,
                        progress=_counting(trace, at, "critic micro-batch"),
                    )
                    _add(stats, "critic", critic)
        attrs["tokens"] = batch.tokens.num_tokens * a.epochs
        attrs["skipped_rows"] = sum(stats.get("policy/skipped_rows", []))  # zero advantage: no pass run
        shares = stats.get("policy/padding_share", [])
        attrs["padding_share"] = (
            round(sum(shares) / len(shares), 4) if shares else 0.0
        )  # of computed positions
        attrs["packed"] = sum(stats.get("policy/packed", [])) > 0
    trace.counter("tokens_trained", step, batch.tokens.num_tokens * a.epochs)
    computed = sum(
        stats.get("policy/computed_tokens", [])
    )  # every optimizer step's rows run forward/backward
    trace.counter("tokens_computed", step, computed)
    if torch.cuda.is_available():
        trace.counter("gpu_mem_peak_bytes", step, torch.cuda.max_memory_allocated())
    out = {key: sum(xs) / len(xs) for key, xs in stats.items()}
    out["throughput/train_tokens"] = float(batch.tokens.num_tokens * a.epochs)
    out["throughput/computed_tokens"] = float(computed)  # what MFU counts (zero-advantage rows skipped)
    out["policy/skipped_rows"] = sum(stats.get("policy/skipped_rows", []))  # a count: summed, not averaged
    return out


def _counting(trace: TraceWriter, at: Counts, name: str) -> Progress:
    """A train step's ``progress``: its micro-batch k/K as the count ``name`` of the update, beside ``at``."""

    def report(k: int, of: int) -> None:
        trace.progress("update", **at, **{name: (k, of)})

    return report


def _add(stats: dict[str, list[float]], prefix: str, metrics: dict[str, float]) -> None:
    for key, value in metrics.items():
        stats.setdefault(f"{prefix}/{key}", []).append(float(value))
