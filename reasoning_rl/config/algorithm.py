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

    enabled: bool = False
    buffer: int = Field(default=64, ge=1)
    penalty: float = Field(default=1.0, ge=0.0)


class RolloutCorrectionConfig(_Section):
    """Truncated importance sampling against the rollout/trainer mismatch (algorithms/rollout_correction.py).

    On: the engine returns sampling log-probs, the trainer recomputes its own (old) log-probs, and each token's
    loss is weighted by min(exp(old - rollout), tis_cap); with ``mis`` sequences whose ratio leaves
    [mis_low, mis_high] are dropped. The mismatch metrics are logged whenever both log-probs exist."""

    enabled: bool = False
    tis_cap: float | None = Field(default=2.0, gt=0.0, description="Token-level TIS cap C; None: no TIS.")
    mis: bool = Field(default=False, description="Sequence-level masking (MIS) on top of TIS.")
    mis_level: Literal["sequence", "geometric"] = Field(
        default="geometric",
        description="'sequence': product of token ratios; 'geometric': their geometric mean.",
    )
    mis_low: float = Field(default=0.5, ge=0.0, lt=1.0)
    mis_high: float = Field(default=2.0, gt=1.0)
    mismatch_threshold: float = Field(
        default=0.5, gt=0.0, description="|delta log p| counted by mismatch/frac_over."
    )


AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


class LossConfig(_Section):
    """How the policy loss is formed: the policy-loss keys of ``algorithm`` (which extends this), the one
    definition ``algorithms.policy_loss`` and ``Policy.train_step`` take."""

    clip_low: float = Field(default=0.2, ge=0.0)
    clip_high: float = Field(default=0.2, ge=0.0, description="Clip-higher (DAPO) when > clip_low.")
    dual_clip: float | None = Field(
        default=None,
        gt=1.0,
        description="c > 1: caps the loss of negative-advantage tokens at c * |A| (Ye et al.).",
    )
    ratio: Literal["token", "sequence"] = Field(default="token", description="'sequence' = GSPO.")
    loss_agg: AggMode = "token-mean"
    kl_coef: float = Field(default=0.0, ge=0.0)
    kl_estimator: KLEstimator = "k3"
    kl_mode: Literal["loss", "reward"] = Field(
        default="loss",
        description="'loss': a KL term in the policy loss; "
        "'reward': subtracted from the rewards (no loss term).",
    )
    entropy_coef: float = 0.0

    @property
    def uses_kl_loss(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "loss"

    @property
    def uses_kl_reward(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "reward"


class AlgorithmConfig(LossConfig):
    name: Literal["grpo", "ppo"] = "grpo"
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
    micro_batch_tokens: int = Field(default=8192, ge=1)
    old_logprobs: Literal["auto", "recompute", "rollout"] = Field(
        default="auto",
        description="Where the PPO ratio's old log-probs come from, decided once when the run is "
        "built (trainer/plan.py). 'auto': with a single update per batch, the policy's own, detached (ratio exactly "
        "1, no extra pass; the engine then skips per-token log-probs), or the engine's where GAE or a KL reward "
        "needs them; a recompute by the trainer otherwise. 'recompute': always the trainer's pass. 'rollout': "
        "always the engine's.",
    )
    gamma: float = Field(default=1.0, ge=0.0, le=1.0)
    lam: float = Field(default=1.0, ge=0.0, le=1.0)
    dynamic_sampling: bool = Field(
        default=False, description="DAPO: drop groups whose rewards are all equal and refill."
    )
    max_refill_rounds: int = Field(default=3, ge=0)
    overlong: OverlongConfig = Field(default_factory=OverlongConfig)
    rollout_correction: RolloutCorrectionConfig = Field(default_factory=RolloutCorrectionConfig)

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
