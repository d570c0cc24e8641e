"""The one typed config of a run: YAML file + dotted ``a.b=c`` overrides, validated with pydantic.

Every section forbids unknown keys so a typo is an error naming the key and the keys that exist, instead of a
silently ignored setting. The resolved config (defaults filled in) is saved as ``run_dir/config.yaml``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from reasoning_rl.overrides import OverrideError
from reasoning_rl.overrides import parse_overrides as read_overrides
from reasoning_rl.registry import ENGINES, ESTIMATORS

_NUMBER_TYPES = (int, float, int | None, float | None)


class ConfigError(ValueError):
    """A user mistake in a config file or override; the message names the key and what is allowed."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Counts and rates are numbers: YAML ``true`` would otherwise pass as 1 (``trainer.steps=true``)."""
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in _NUMBER_TYPES:
                raise ValueError(f"expected a number, got the boolean {value!r}")
        return value


class RunConfig(_Section):
    name: str = "run"
    dir: str = Field(default="runs/{name}", description="Run directory; '{name}' is replaced by run.name.")
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    doctor: bool = Field(default=True, description="Run `rrl doctor` checks before loading anything heavy.")


class ModelConfig(_Section):
    path: str = Field(description="Local HF model dir, hub name, or a dir holding a GGUF file (see gguf_file).")
    gguf_file: str | None = None
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    gradient_checkpointing: bool = False
    ref_offload: bool = Field(default=False, description="Keep the frozen reference policy on CPU.")
    fsdp: Literal["auto", "on", "off"] = "auto"
    compile: bool | None = Field(default=None, description="torch.compile each decoder layer and the log-prob head "
                                 "of the trained models (faster updates after a one-off compile; one graph serves "
                                 "every micro-batch shape). None: on when training on CUDA, off on CPU.")


class SourceConfig(_Section):
    """One dataset: a file/dir/hub name (``path``) or a built-in seeded generator (``generator``)."""

    path: str | None = None
    split: str = "train"
    generator: Literal["arithmetic", "fixed_digit"] | None = None
    size: int = Field(default=256, ge=1, description="Rows to generate (generator only).")
    options: dict[str, Any] = Field(default_factory=dict, description="Generator options.")
    limit: int | None = Field(default=None, ge=1, description="Use only the first N rows.")
    data_source: str | None = Field(default=None, description="Default data_source for rows that have none.")

    @model_validator(mode="after")
    def _one_of(self) -> SourceConfig:
        if (self.path is None) == (self.generator is None):
            raise ValueError("set exactly one of 'path' or 'generator'")
        return self


class RowConfig(_Section):
    """How rows become examples: the row keys of ``data`` (which extends this), read by ``data.schema``."""

    prompt_template: str = Field(default=
        "{question}", description="Python format string applied to simple rows ({question}, plus any column)."
    )
    system_prompt: str | None = None
    grader_map: dict[str, str] = Field(
        default_factory=dict, description="data_source or ability -> grader name (explicit row 'grader' wins)."
    )
    default_grader: str = "math"


class DataConfig(RowConfig):
    train: list[SourceConfig] = Field(min_length=1)
    val: list[SourceConfig] = Field(default_factory=list)
    chat_template: bool | str = Field(default=True, description="true: wrap prompts with the tokenizer's chat "
                                      "template; false: plain text; a string: this Jinja chat template instead, "
                                      "inline (contains '{%' or '{{') or a file path (relative to the working "
                                      "directory).")
    on_bad_row: Literal["error", "skip"] = "error"
    max_prompt_tokens: int = Field(default=1024, ge=1)
    shuffle: bool = True

    @model_validator(mode="before")
    @classmethod
    def _single_source(cls, data: Any) -> Any:
        """Allow ``train: {path: ...}`` as shorthand for a one-element list."""
        if isinstance(data, dict):
            for key in ("train", "val"):
                if isinstance(data.get(key), dict | str):
                    value = data[key]
                    data = {**data, key: [{"path": value} if isinstance(value, str) else value]}
        return data


class SamplingParams(_Section):
    """What to sample per prompt (``temperature=0`` is greedy): the sampling keys of ``rollout`` (which
    extends this) and of every engine request (``rollout.SamplingConfig``)."""

    n: int = Field(default=1, ge=1, description="Samples per prompt.")
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(default=256, ge=1)
    stop: list[str] = Field(default_factory=list)
    ignore_eos: bool = Field(default=False, description="Generate exactly max_tokens (fixed-length benchmarks).")


class RolloutConfig(SamplingParams):
    n: int = Field(default=8, ge=1, description="Samples per prompt (the GRPO group size).")
    engine: str = Field(default="auto", description="'auto' (vLLM when installed, else hf), or a name of the "
                        "engine registry: vllm, hf, or a plugin's.")
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0, description="None: 0.2 on CPU, 0.5 on GPU.")
    sleep: bool | None = Field(default=None, description="vLLM sleep mode while training; None: on for GPU.")
    seed_per_sample: bool | None = Field(default=None, description="Seed every sample (run.seed, step, sample "
                                         "index): reproducible rollouts, but vLLM then draws each sequence's noise "
                                         "with its own generator (a kernel per sequence per token); false: one "
                                         "engine-wide stream. None: on for CPU, off on CUDA (where batched kernels "
                                         "are not bitwise reproducible anyway).")
    freshness_check: bool = Field(default=True, description="After every weight hand-off, prove the engine serves "
                                  "the trainer's weights (per-tensor checksums + a fixed-prompt log-prob probe); "
                                  "a mismatch stops the run with WeightSyncError.")
    freshness_probe_tol: float | None = Field(default=None, gt=0.0, description="Mean |delta log p| per probe "
                                              "token allowed; None: from the engine's dtype (freshness.PROBE_TOL).")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Extra vLLM engine arguments "
                                        "(``LLM(...)``: e.g. max_num_seqs, max_num_batched_tokens, async_scheduling).")

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        return v if v == "auto" else ENGINES.check(v)

    @field_validator("engine_args")
    @classmethod
    def _not_ours(cls, v: dict[str, Any]) -> dict[str, Any]:
        owned = {"model", "dtype", "seed", "gpu_memory_utilization", "max_model_len", "enable_sleep_mode",
                 "logprobs_mode"}
        clash = sorted(owned & set(v))
        if clash:
            raise ValueError(f"{clash} are set from other keys (model.*, run.seed, rollout.*); remove them here")
        return v


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
    mis_level: Literal["sequence", "geometric"] = Field(default="geometric", description="'sequence': product of "
                                                        "token ratios; 'geometric': their geometric mean.")
    mis_low: float = Field(default=0.5, ge=0.0, lt=1.0)
    mis_high: float = Field(default=2.0, gt=1.0)
    mismatch_threshold: float = Field(default=0.5, gt=0.0, description="|delta log p| counted by "
                                      "mismatch/frac_over.")


AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
KLEstimator = Literal["k1", "k2", "k3"]


class LossConfig(_Section):
    """How the policy loss is formed: the policy-loss keys of ``algorithm`` (which extends this), the one
    definition ``algorithms.policy_loss`` and ``Policy.train_step`` take."""

    clip_low: float = Field(default=0.2, ge=0.0)
    clip_high: float = Field(default=0.2, ge=0.0, description="Clip-higher (DAPO) when > clip_low.")
    dual_clip: float | None = Field(default=None, gt=1.0, description="c > 1: caps the loss of "
                                    "negative-advantage tokens at c * |A| (Ye et al.).")
    ratio: Literal["token", "sequence"] = Field(default="token", description="'sequence' = GSPO.")
    loss_agg: AggMode = "token-mean"
    kl_coef: float = Field(default=0.0, ge=0.0)
    kl_estimator: KLEstimator = "k3"
    kl_mode: Literal["loss", "reward"] = Field(default="loss", description="'loss': a KL term in the policy loss; "
                                               "'reward': subtracted from the rewards (no loss term).")
    entropy_coef: float = 0.0

    @property
    def uses_kl_loss(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "loss"

    @property
    def uses_kl_reward(self) -> bool:
        return self.kl_coef > 0 and self.kl_mode == "reward"


class AlgorithmConfig(LossConfig):
    name: Literal["grpo", "ppo"] = "grpo"
    advantage: str = Field(default="grpo", description="An outcome estimator of the advantage registry "
                           "(grpo, drgrpo, rloo, reinforce_pp, reinforce_pp_baseline, or a plugin's), or "
                           "'gae' (PPO's critic; the default with name=ppo).")
    epochs: int = Field(default=1, ge=1, description="Policy update epochs over each batch.")
    mini_batch_size: int | None = Field(default=None, ge=1, description="Samples per optimizer step; None: whole batch.")
    micro_batch_tokens: int = Field(default=8192, ge=1)
    old_logprobs: Literal["auto", "recompute", "rollout"] = Field(
        default="auto", description="Where the PPO ratio's old log-probs come from, decided once when the run is "
        "built (trainer/plan.py). 'auto': with a single update per batch, the policy's own, detached (ratio exactly "
        "1, no extra pass; the engine then skips per-token log-probs), or the engine's where GAE or a KL reward "
        "needs them; a recompute by the trainer otherwise. 'recompute': always the trainer's pass. 'rollout': "
        "always the engine's.")
    gamma: float = Field(default=1.0, ge=0.0, le=1.0)
    lam: float = Field(default=1.0, ge=0.0, le=1.0)
    dynamic_sampling: bool = Field(default=False, description="DAPO: drop groups whose rewards are all equal and refill.")
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
            raise ValueError("rollout_correction.enabled weighs the trainer's recomputed log-probs against the "
                             "engine's: it needs old_logprobs 'auto' or 'recompute', not 'rollout'")
        return self


# Estimators whose baseline is the prompt's other samples: they need rollout.n >= 2.
GROUP_BASELINE_ESTIMATORS = ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline")


class OptimConfig(_Section):
    lr: float = Field(default=1e-6, gt=0.0)
    weight_decay: float = Field(default=0.0, ge=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float | None = Field(default=1.0, gt=0.0)
    schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(default=0, ge=0)
    critic_lr: float = Field(default=1e-5, gt=0.0)


class GradingConfig(_Section):
    workers: int = Field(default=2, ge=1)
    backend: Literal["auto", "process", "ray"] = "auto"
    ray_address: str | None = None
    timeout_s: float = Field(default=10.0, gt=0.0)
    retries: int = Field(default=1, ge=0)
    cache: bool = True
    max_in_flight: int = Field(default=256, ge=1)
    options: dict[str, dict[str, Any]] = Field(default_factory=dict, description="grader name -> grade options.")
    selftest: bool = Field(default=True, description="Run the golden cases of the graders this run uses before "
                           "step 1 (`rrl graders selftest`); a disagreement stops the run.")


class EvalConfig(_Section):
    every: int = Field(default=0, ge=0, description="Evaluate every k steps (0: only at the end when val is set).")
    n: int = Field(default=1, ge=1, description="Samples per prompt (pass@k / maj@k use k = n).")
    temperature: float = Field(default=0.0, ge=0.0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_prompts: int | None = Field(default=None, ge=1)
    at_start: bool = False


class TrainerConfig(_Section):
    steps: int = Field(default=100, ge=0)
    batch_size: int = Field(default=8, ge=1, description="Prompts per step (each sampled rollout.n times).")
    checkpoint_every: int = Field(default=0, ge=0, description="0: only the final checkpoint.")
    keep_checkpoints: int = Field(default=2, ge=1)
    resume: str = Field(default="never", description="'never', 'auto' (latest checkpoint in run dir), or a checkpoint path.")
    export: bool = True
    overwrite: bool = Field(default=False, description="Allow starting fresh in a run dir that already has checkpoints.")
    force_resume: bool = Field(default=False, description="Resume even though trajectory-defining keys (model, "
                               "data, seed, rollout, algorithm, optimizer) changed since the checkpoint (`--force`).")


class LoggingConfig(_Section):
    console: Literal["rich", "plain", "none"] = "rich"
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "reasoning-rl"
    samples: bool = Field(default=True, description="Write every step's prompts, responses and grades to samples/.")
    log_completions: int = Field(default=6, ge=0, description="Samples per step shown as TensorBoard text and a W&B "
                                 "table (the step's best, worst and errored in turn: prompt, response, ground "
                                 "truth, grade, reason); 0: none.")
    engine_logs: bool = Field(default=False, description="Show the rollout engine's (vLLM's) own INFO/WARNING log "
                              "lines and the libraries' progress bars; off: only their errors (`--verbose`).")


class Config(_Section):
    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig
    data: DataConfig
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    grading: GradingConfig = Field(default_factory=GradingConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)

    @model_validator(mode="after")
    def _batch_fits(self) -> Config:
        total = self.trainer.batch_size * self.rollout.n
        mb = self.algorithm.mini_batch_size
        if mb is not None and (mb > total or total % mb):
            raise ValueError(
                f"algorithm.mini_batch_size={mb} must divide trainer.batch_size*rollout.n={total}"
            )
        return self

    @model_validator(mode="after")
    def _groups_have_members(self) -> Config:
        if self.algorithm.advantage in GROUP_BASELINE_ESTIMATORS and self.rollout.n < 2:
            raise ValueError(
                f"rollout.n={self.rollout.n}: algorithm.advantage={self.algorithm.advantage!r} compares each sample "
                "with the other samples of its prompt, so a group of 1 has advantage 0 and trains nothing; set "
                "rollout.n >= 2, or use a batch-baseline estimator (algorithm.advantage=reinforce_pp)"
            )
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir.format(name=self.run.name))


# ---------------------------------------------------------------------------------------------- loading


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The field names valid at ``loc`` (for 'unknown key' messages)."""
    current: type[BaseModel] = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(part)
        sub = _model_of(field.annotation) if field is not None else None
        if sub is None:
            return None
        current = sub
    return sorted(current.model_fields)


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def format_validation_error(err: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}):"]
    for e in err.errors():
        loc = tuple(e["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(Config, loc)
            hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
            lines.append(f"  {key}: unknown key{hint}")
        elif e["type"] == "missing":
            lines.append(f"  {key}: required key is missing")
        else:
            lines.append(f"  {key}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def parse_overrides(overrides: list[str]) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict; YAML values, but a string key's text as written (``reasoning_rl.overrides``)."""
    try:
        return read_overrides(overrides, Config)
    except OverrideError as exc:
        raise ConfigError(str(exc)) from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load_config(path: str | Path | None, overrides: list[str] | None = None, *,
                base: dict[str, Any] | None = None) -> Config:
    """Read YAML (or ``base``), apply dotted overrides, validate. Raises ``ConfigError`` with a readable message."""
    raw: dict[str, Any] = dict(base or {})
    source = "<dict>"
    if path is not None:
        p = Path(path)
        source = str(p)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p}: top level must be a mapping of sections (run, model, data, ...)")
        raw = _merge(raw, loaded)
    if overrides:
        raw = _merge(raw, _lists_from_overrides(raw, parse_overrides(overrides)))
        source += " + overrides"
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, source)) from None


def _lists_from_overrides(raw: dict[str, Any], tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Overrides like ``data.train.0.limit=5`` address an item of an existing list."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        current = raw.get(key)
        indexed = isinstance(value, dict) and bool(value) and all(k.isdigit() for k in value)
        if indexed and isinstance(current, dict):  # the one-source shorthand `train: {...}`
            current = [current]
        if indexed and not isinstance(current, list):
            raise ConfigError(f"override {prefix}{key}.{min(value, key=int)}=...: {prefix}{key} has no items to "
                              f"index (it is empty or unset); set the whole list, e.g. {prefix}{key}=[{{path: FILE}}]")
        if indexed and isinstance(current, list):
            items = list(current)
            for idx, sub in value.items():
                i = int(idx)
                if i >= len(items):
                    raise ConfigError(f"override index {prefix}{key}.{i} is out of range (list has {len(items)} items)")
                items[i] = _merge(items[i], sub) if isinstance(sub, dict) and isinstance(items[i], dict) else sub
            out[key] = items
        elif isinstance(value, dict) and isinstance(current, dict):
            out[key] = _lists_from_overrides(current, value, f"{prefix}{key}.")
        else:
            out[key] = value
    return out


def config_text(config: Config) -> str:
    """The resolved config as YAML, every default spelled out (``run_dir/config.yaml``, ``--print-config``)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def save_config(config: Config, path: str | Path) -> None:
    """Write the resolved config (every default spelled out) so the run can be reproduced exactly."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(config_text(config), encoding="utf-8")
