"""The ``algorithm`` section: advantage estimator, policy loss, KL, rollout correction, overlong shaping."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from reasoning_rl.config.base import _Section
from reasoning_rl.registry import ESTIMATORS


class OverlongConfig(_Section):
    """DAPO soft overlong punishment: linearly penalise responses in the last ``buffer`` tokens of the budget."""

    enabled: bool = Field(default=False, description="Subtract the overlong penalty from the rewards.")
    buffer: int = Field(
        default=64, ge=1, description="Last tokens of rollout.max_tokens over which the penalty grows from 0."
    )
    penalty: float = Field(
        default=1.0, ge=0.0, description="Penalty at the full budget (linear over the buffer)."
    )


class RolloutCorrectionConfig(_Section):
    """Truncated importance sampling against the rollout/trainer mismatch (algorithms/rollout_correction.py).

    On: the engine returns sampling log-probs, the trainer recomputes its own (old) log-probs, and each token's
    loss is weighted by min(exp(old - rollout), tis_cap); with ``mis`` sequences whose ratio leaves
    [mis_low, mis_high] are dropped. The mismatch metrics are logged whenever both log-probs exist."""

    enabled: bool = Field(
        default=False, description="Weigh the policy loss by the truncated trainer/engine ratio."
    )
    tis_cap: float | None = Field(default=2.0, gt=0.0, description="Token-level TIS cap C; None: no TIS.")
    mis: bool = Field(default=False, description="Sequence-level masking (MIS) on top of TIS.")
    mis_level: Literal["sequence", "geometric"] = Field(
        default="geometric",
        description="'sequence': product of token ratios; 'geometric': their geometric mean.",
    )
    mis_low: float = Field(
        default=0.5, ge=0.0, lt=1.0, description="MIS drops sequences whose ratio is below this."
    )
    mis_high: float = Field(default=2.0, gt=1.0, description="MIS drops sequences whose ratio is above this.")
    mismatch_threshold: float = Field(
        default=0.5, gt=0.0, description="|delta log p| counted by mismatch/frac_over."
    )


AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


class LossConfig(_Section):
    """How the policy loss is formed: the policy-loss keys of ``algorithm`` (which extends this), the one
    definition ``algorithms.policy_loss`` and ``Policy.train_step`` take."""

    clip_low: float = Field(
        default=0.2, ge=0.0, description="PPO clip: the ratio is clipped below at 1 - clip_low."
    )
    clip_high: float = Field(default=0.2, ge=0.0, description="Clip-higher (DAPO) when > clip_low.")
    dual_clip: float | None = Field(
        default=None,
        gt=1.0,
        description="c > 1: caps the loss of negative-advantage tokens at c * |A| (Ye et al.).",
    )
    ratio: Literal["token", "sequence"] = Field(default="token", description="'sequence' = GSPO.")
    loss_agg: AggMode = Field(
        default="token-mean",
        description="How token losses reduce: mean over all tokens; mean of per-sequence means; "
        "per-sequence sums over a constant length (Dr.GRPO).",
    )
    kl_coef: float = Field(
        default=0.0, ge=0.0, description="Weight of the KL to the reference policy; 0: no reference model."
    )
    kl_estimator: KLEstimator = Field(
        default="k3", description="KL estimator per token (Schulman's k1, k2, k3)."
    )
    kl_mode: Literal["loss", "reward"] = Field(
        default="loss",
        description="'loss': a KL term in the policy loss; "
        "'reward': subtracted from the rewards (no loss term).",
    )
    entropy_coef: float = Field(
        default=0.0, description="Entropy bonus weight (subtracted from the loss); 0: off."
    )
    skip_zero_advantage: bool = Field(
        default=True,
        description="No forward/backward for rows whose advantage is exactly 0 on every token (the step is "
        "unchanged: their gradient is 0). false: the full pass over every row, as peers run it (matched-work "
        "benchmarks). Counted as policy/skipped_rows; MFU counts only policy/computed_tokens.",
    )

    @property
    def uses_kl_loss(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "loss"

    @property
    def uses_kl_reward(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "reward"


class AlgorithmConfig(LossConfig):
    name: Literal["grpo", "ppo"] = Field(
        default="grpo", description="grpo: outcome advantages, no critic; ppo: a critic and GAE."
    )
    advantage: str = Field(
        default="grpo",
        description="An outcome estimator of the advantage registry "
        "(grpo, drgrpo, rloo, reinforce_pp, reinforce_pp_baseline, or a plugin's), or "
        "'gae' (PPO's critic; the default with name=ppo).",
    )
    epochs: int = Field(default=1, ge=1, description="Policy update epochs over each batch.")
    mini_batch_size: int | None = Field(
        default=None, ge=1, description="Samples per optimizer step; None: whole batch."
    )
    micro_batch_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of one forward/backward micro-batch, padding included, for the update and the "
        "old/ref log-prob and value passes (memory vs speed); a sequence longer than it is a micro-batch of its own. "
        "None: on CUDA the largest the memory plan allows (`rrl train --dry-run` prints it), 8192 on CPU.",
    )
    packing: Literal["auto", "on", "off"] = Field(
        default="auto",
        description="Micro-batch layout. 'off': length-sorted right-padded blocks (plain causal attention). 'on': "
        "sequences packed back to back into one row per micro-batch, position ids restarting per sequence "
        "(no padding; attention kept inside each sequence by transformers' packed-sequence masks). 'auto': "
        "whichever the cost estimate (tokens plus attended pairs for the model's attention) finds cheaper, "
        "per pass. The padding share is reported as policy/padding_share.",
    )
    old_logprobs: Literal["auto", "recompute", "rollout"] = Field(
        default="auto",
        description="Where the PPO ratio's old log-probs come from, decided once when the run is "
        "built (trainer/plan.py). 'auto': with a single update per batch, the policy's own, detached (ratio exactly "
        "1, no extra pass; the engine then skips per-token log-probs), or the engine's where GAE or a KL reward "
        "needs them; a recompute by the trainer otherwise. 'recompute': always the trainer's pass. 'rollout': "
        "always the engine's.",
    )
    gamma: float = Field(default=1.0, ge=0.0, le=1.0, description="GAE discount (name=ppo).")
    lam: float = Field(default=1.0, ge=0.0, le=1.0, description="GAE lambda (name=ppo).")
    dynamic_sampling: bool = Field(
        default=False, description="DAPO: drop groups whose rewards are all equal and refill."
    )
    max_refill_rounds: int = Field(
        default=3,
        ge=0,
        description="Extra sampling rounds dynamic_sampling may take to fill a batch (on the frontier: at "
        "most max_refill_rounds x batch_size groups admitted a step in place of rejected ones).",
    )
    overlong: OverlongConfig = Field(
        default_factory=OverlongConfig, description="DAPO soft overlong punishment."
    )
    rollout_correction: RolloutCorrectionConfig = Field(
        default_factory=RolloutCorrectionConfig,
        description="Importance sampling against the rollout/trainer mismatch.",
    )

    @model_validator(mode="before")
    @classmethod
    def _ppo_uses_gae(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("name") == "ppo" and "advantage" not in data:
            data = {**data, "advantage": "gae"}
        return data

    @field_validator("advantage")
    @classmethod
    def _known_estimator(cls, v: str) -> str:
        return v if v == "gae" else ESTIMATORS.check(v)

    @model_validator(mode="after")
    def _estimator_fits(self) -> AlgorithmConfig:
        if (self.name == "ppo") != (self.advantage == "gae"):
            raise ValueError("advantage 'gae' goes with name 'ppo' (a critic) and only with it")
        if self.rollout_correction.enabled and self.old_logprobs == "rollout":
            raise ValueError(
                "rollout_correction.enabled weighs the trainer's recomputed log-probs against the "
                "engine's: it needs old_logprobs 'auto' or 'recompute', not 'rollout'"
            )
        return self


# Estimators whose baseline is the prompt's other samples: they need rollout.n >= 2.
GROUP_BASELINE_ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline")
