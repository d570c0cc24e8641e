"""What may continue a run: the checks between a checkpoint and the config (and data) asked to resume it.

``trainer.resume`` promises to continue *exactly*; a checkpoint is resumed only when every key that shapes
the trajectory (model, data, seed, rollout, algorithm, optimizer) is what it was when the checkpoint was
written, and the training rows are the same. Keys that only change bookkeeping or speed may differ
(``RESUMABLE``). ``trainer.force_resume`` (``rrl train --force``) continues anyway, saying what changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reasoning_rl.config import Config
from reasoning_rl.data import Example

# Dotted keys (or prefixes ending in '.') that may change between a checkpoint and its resume.
RESUMABLE: tuple[str, ...] = (
    "run.name",
    "run.dir",
    "run.doctor",
    "trainer.steps",
    "trainer.resume",
    "trainer.overwrite",
    "trainer.force_resume",
    "trainer.checkpoint_every",
    "trainer.checkpoint_minutes",
    "trainer.keep_checkpoints",
    "trainer.export",
    "logging.",
    "eval.",
    "data.val",
    "grading.workers",
    "grading.backend",
    "grading.ray_address",
    "grading.max_in_flight",
    "grading.cache",
    "grading.timeout_s",
    "grading.retries",  # budgets: a grade that misses one is masked, never scored
    "grading.options.lean.lean",
    "grading.options.lean.project",
    "grading.options.lean.lean_path",  # where, not what
    "rollout.gpu_memory_utilization",
    "rollout.engine_args",
    "rollout.sleep",
    "model.compile",
    "model.gradient_checkpointing",
    "model.ref_offload",
    "resources.",  # where the ranks run: sharded checkpoints reshard to any world size
    "model.cpu_offload",
    "model.reshard_after_forward",
    "model.forward_prefetch",
    "rollout.handoff_bucket_mb",
)


class TrainError(RuntimeError):
    """A run cannot start or continue (bad run dir state, data/model problems); the message says why."""


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _resumable(key: str, cfg: Config) -> bool:
    if key == "trainer.steps" and cfg.optim.schedule == "cosine":
        return False  # the cosine schedule's length is the run's length: changing it changes every LR
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in RESUMABLE)


UNSET = "(unset)"


def _has_parent(key: str, flat: Mapping[str, Any]) -> bool:
    """Whether a dotted prefix of ``key`` is a leaf of ``flat`` (an empty mapping that ``key`` now fills)."""
    parts = key.split(".")
    return any(".".join(parts[:i]) in flat for i in range(1, len(parts)))


def changed_keys(saved: Mapping[str, Any], cfg: Config) -> list[tuple[str, Any, Any]]:
    """(key, checkpoint's value, current value) for each trajectory-defining key that differs. Keys the
    checkpoint's config lacks entirely (fields added by a newer version) are not compared; entries added to or
    removed from a free-form mapping (``grading.options``, ``data.grader_map``, ...) are."""
    old = _flatten(saved)
    new = _flatten(cfg.model_dump(mode="json"))
    out = []
    for key in sorted(set(old) | set(new)):
        if key in old and key in new:
            differs = old[key] != new[key]
        else:
            differs = _has_parent(key, new if key in old else old)
        if differs and not _resumable(key, cfg):
            out.append((key, old.get(key, UNSET), new.get(key, UNSET)))
    return out


def check_config(saved: Mapping[str, Any] | None, cfg: Config, checkpoint: Path) -> list[str]:
    """Refuse to resume ``checkpoint`` with changed trajectory keys unless forced; returns the changes
    (``key: old -> new``) that ``trainer.force_resume`` let through."""
    if saved is None:
        return []
    diffs = [f"{k}: {_shown(a)} -> {_shown(b)}" for k, a, b in changed_keys(saved, cfg)]
    if diffs and not cfg.trainer.force_resume:
        raise TrainError(
            f"cannot resume {checkpoint} exactly: changed since that checkpoint: {'; '.join(diffs)}. Revert them, "
            "start a new run (another run.name), or continue anyway with --force (trainer.force_resume=true)"
        )
    return diffs


# What a checkpoint's in-flight frontier (rollout.max_lag > 0) was admitted and generated under, and how the
# resuming value may differ: "same" (every group holds that many samples), "no less" (a smaller value would put
# admitted groups past their deadline, over the capacity, or leave partial samples no token budget).
# rollout.running_groups is not one: fewer slots than the checkpoint's unfinished groups only delay admission.
_FRONTIER_KEYS: tuple[tuple[str, str, str], ...] = (
    ("rollout.n", "same", "each in-flight group holds its samples"),
    ("rollout.max_lag", "no less", "the in-flight groups' deadlines were set by it"),
    ("trainer.batch_size", "no less", "the in-flight groups were admitted for it"),
    ("rollout.max_tokens", "no less", "the partial samples were generated under it"),
)


def check_frontier(
    saved: Mapping[str, Any] | None, frontier: Mapping[str, Any] | None, cfg: Config, checkpoint: Path
) -> None:
    """Refuse, even with ``--force``, a resume whose config cannot take the checkpoint's in-flight frontier
    (admitted groups, partial samples) as it is: one line naming the key and both values. Before, such a run
    passed ``--force`` and died at its first step (a group past its deadline, a group that never completes, a
    partial sample with no token budget left)."""
    if saved is None or not frontier or not (frontier.get("groups") or frontier.get("partial")):
        return
    old, new = _flatten(saved), _flatten(cfg.model_dump(mode="json"))
    for key, rule, why in _FRONTIER_KEYS:
        was, now = old.get(key), new[key]
        if not isinstance(was, int) or (now == was if rule == "same" else now >= was):
            continue
        raise TrainError(
            f"cannot resume {checkpoint}: {key}: {was} -> {now}, but the checkpoint holds "
            f"{len(frontier.get('groups', []))} in-flight group(s) and {why}; "
            f"resume with {key}={was}{'' if rule == 'same' else ' or more'}, or start a new run (another run.name)"
        )


def _shown(value: Any) -> str:
    return UNSET if value is UNSET else repr(value)


def data_fingerprint(examples: Sequence[Example]) -> dict[str, Any]:
    """The training rows as the trainer sees them (ids, prompts, ground truths, graders), hashed."""
    digest = hashlib.sha256()
    for ex in examples:
        digest.update(
            json.dumps(
                [ex.uid, list(ex.messages), ex.ground_truth, ex.grader], default=str, sort_keys=True
            ).encode()
        )
        digest.update(b"\n")
    return {"prompts": len(examples), "sha256": digest.hexdigest()}


def check_data(
    saved: Mapping[str, Any] | None, examples: Sequence[Example], cfg: Config, checkpoint: Path
) -> list[str]:
    """Refuse to resume on different training rows (the sampler's position would point at other prompts)."""
    if saved is None:  # checkpoints written before fingerprints: the sampler's size check is all there is
        return []
    now = data_fingerprint(examples)
    if now == dict(saved):
        return []
    what = (
        f"{saved.get('prompts')} -> {now['prompts']} prompts"
        if saved.get("prompts") != now["prompts"]
        else f"same count ({now['prompts']}) but different rows"
    )
    if cfg.trainer.force_resume and saved.get("prompts") == now["prompts"]:
        return [f"training data: {what}"]
    raise TrainError(
        f"cannot resume {checkpoint}: the training data changed since that checkpoint ({what}); restore the data, "
        "or start a new run (another run.name)"
        + (
            "; --force cannot continue with a different number of prompts"
            if cfg.trainer.force_resume
            else ", or continue anyway with --force (same number of prompts only)"
        )
    )


def rotate(path: Path) -> Path | None:
    """Move ``path`` aside to the first free ``stem.N.suffix`` (kept, not deleted); returns the new name."""
    if not path.exists():
        return None
    n = 1
    while (target := path.with_name(f"{path.stem}.{n}{path.suffix}")).exists():
        n += 1
    path.rename(target)
    return target
