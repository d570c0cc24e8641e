"""What a step follows, decided once when the run is built: where the old log-probs come from (which fixes
both the engine request and the update's branch). The models it trains and scores with are
``reasoning_rl.factory.Models``."""

from __future__ import annotations

from dataclasses import dataclass

from reasoning_rl.config import AlgorithmConfig, Config
from reasoning_rl.trainer.records import OldLogprobSource


def old_logprob_source(cfg: Config) -> OldLogprobSource:
    """The one decision of ``algorithm.old_logprobs``.

    ``rollout`` -> the engine's; ``recompute`` -> a trainer pass. ``auto``: with one update per batch (one
    epoch, one mini-batch) the policy's own, detached (ratio exactly 1, no pass, the engine skips per-token
    log-probs), unless GAE or a KL reward also needs them as numbers: then the engine's; with several
    updates per batch a recompute. The batch size is the configured one: masking only shrinks a batch,
    and a smaller batch still fits one mini-batch. ``algorithm.rollout_correction`` weighs the trainer's
    log-probs against the engine's, so it always needs a recompute (the config refuses it with ``rollout``), and so
    does a continuous run (``rollout.max_lag > 0``): the recompute is decoupled PPO's proximal policy.
    """
    a = cfg.algorithm
    if a.old_logprobs == "rollout":
        return "engine"
    if a.old_logprobs == "recompute" or a.rollout_correction.enabled or cfg.rollout.max_lag > 0:
        return "recompute"
    total = cfg.trainer.batch_size * cfg.rollout.n
    single_update = a.epochs == 1 and (a.mini_batch_size is None or a.mini_batch_size >= total)
    if not single_update:
        return "recompute"
    return "engine" if a.advantage == "gae" or a.uses_kl_reward else "policy"


@dataclass(frozen=True)
class StepPlan:
    """The validated ``algorithm`` section plus what was derived from the config once."""

    algorithm: AlgorithmConfig
    old_source: OldLogprobSource
    max_tokens: int  # rollout.max_tokens: the overlong budget and seq-mean-token-sum-norm's constant
    pad_id: int
    max_lag: int = 0  # rollout.max_lag: > 0 trains samples of older versions with decoupled PPO

    @property
    def decoupled(self) -> bool:
        """Whether the loss is decoupled PPO (algorithms/decoupled.py): continuous rollouts."""
        return self.max_lag > 0

    @property
    def engine_logprobs(self) -> bool:
        """Whether the engine returns per-token log-probs: the old log-probs, or (recompute) the drift check."""
        return self.old_source != "policy"


def step_plan(cfg: Config, pad_id: int) -> StepPlan:
    return StepPlan(
        cfg.algorithm, old_logprob_source(cfg), cfg.rollout.max_tokens, pad_id, cfg.rollout.max_lag
    )
