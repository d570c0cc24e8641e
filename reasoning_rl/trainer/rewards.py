"""From graded samples to training signal: rewards, masks, DAPO overlong penalty and dynamic-sampling
filter, and the per-step reward/verdict/length metrics."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from graders.functions import FUNCTION_PREFIX
from graders.runtime.metrics import error_kind
from reasoning_rl.algorithms.shaping import overlong_penalty
from reasoning_rl.config import OverlongConfig
from reasoning_rl.trainer.records import Sample


def rewards_and_mask(
    samples: Sequence[Sample], *, max_tokens: int, overlong: OverlongConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """[N] rewards (grade score, or a composed reward's weighted sum, minus any overlong penalty) and [N] mask
    (False where verdict == error, which a composed reward's grade is when any component erred)."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    if overlong.enabled:
        lengths = torch.tensor([len(s.completion.token_ids) for s in samples], dtype=torch.float32)
        rewards = rewards - overlong_penalty(lengths, max_tokens, overlong.buffer, overlong.penalty)
    mask = torch.tensor([not s.masked for s in samples], dtype=torch.bool)
    return rewards, mask


def informative_groups(samples: Sequence[Sample]) -> set[int]:
    """Groups whose judged rewards are not all equal (DAPO dynamic sampling keeps only these)."""
    scores: dict[int, set[float]] = {}
    for s in samples:
        if not s.masked:
            scores.setdefault(s.group, set()).add(round(s.reward, 9))
    return {g for g, values in scores.items() if len(values) > 1}


def verdict_grader(s: Sample) -> str:
    """The grader spec a sample's verdict comes from. Without composition the row's routed grader; with a
    composed reward (``grading.rewards``) the component that judged, never the row's grader it may not have
    asked: for an error the component that erred (``graders.compose`` names it), for a verdict taken from a
    ``fallback`` component (the first found no answer) that fallback, else the first component."""
    if s.composed is None or not s.composed.components:
        return s.example.grader
    pairs = s.composed.components
    if s.masked:
        component = s.grade.details.get("component")
        for term, _ in pairs:
            if term.name == component:
                return term.grader
    judged = [term for term, _ in pairs[1:] if term.fallback]
    return (judged[-1] if judged else pairs[0][0]).grader


def grader_key(spec: str) -> str:
    """How metrics and messages name a grader spec: as the config names it (``math``, ``module:Class``, and a
    ``{function: module:fn}`` component as ``module:fn``, without the runtime's ``function=`` prefix)."""
    return spec.removeprefix(FUNCTION_PREFIX)


def sample_metrics(samples: Sequence[Sample], rewards: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Reward mean/std and accuracy over judged samples, verdicts per grader, response lengths, truncation."""
    out: dict[str, float] = {}
    judged = rewards[mask]
    out["reward/mean"] = float(judged.mean()) if judged.numel() else float("nan")
    out["reward/std"] = float(judged.std(unbiased=False)) if judged.numel() else float("nan")
    # TRL's frac_reward_zero_std: groups whose judged rewards are all equal (no GRPO signal, no update work)
    groups = {s.group for s in samples if not s.masked}
    out["reward/frac_zero_std"] = (
        1.0 - len(informative_groups(samples)) / len(groups) if groups else float("nan")
    )
    correct = sum(1 for s in samples if s.grade.verdict == "correct")
    out["reward/accuracy"] = correct / max(1, int(mask.sum()))
    verdicts = Counter((grader_key(verdict_grader(s)), s.grade.verdict) for s in samples)
    for verdict in ("correct", "incorrect", "error"):
        out[f"grading/{verdict}"] = float(sum(n for (_, v), n in verdicts.items() if v == verdict))
    for (grader, verdict), n in verdicts.items():
        out[f"grading/{grader}/{verdict}"] = float(n)
    reasons = Counter(error_kind(s.grade.reason) for s in samples if s.masked)
    for reason, n in reasons.items():
        out[f"grading/error_reason/{reason}"] = float(n)
    components = Counter(
        str(s.grade.details["component"])
        for s in samples
        if s.masked and s.composed is not None and "component" in s.grade.details
    )
    for name, n in components.items():
        out[f"grading/error_component/{name}"] = float(n)
    lengths = torch.tensor([len(s.completion.token_ids) for s in samples], dtype=torch.float32)
    out["response/length_mean"] = float(lengths.mean()) if lengths.numel() else 0.0
    out["response/length_max"] = float(lengths.max()) if lengths.numel() else 0.0
    truncated = sum(1 for s in samples if s.completion.finish_reason == "length")
    out["response/truncation_rate"] = truncated / max(1, len(samples))
    out["samples"] = float(len(samples))
    out.update(component_metrics(samples))
    return out


def component_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """``reward/<component>/mean`` of each composed reward component over the judged samples."""
    totals: dict[str, list[float]] = {}
    for s in samples:
        if s.composed is not None and not s.masked:
            for name, score in s.composed.scores().items():
                totals.setdefault(name, []).append(score)
    return {f"reward/{name}/mean": sum(v) / len(v) for name, v in totals.items()}
