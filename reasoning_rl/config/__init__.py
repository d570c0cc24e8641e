"""The one typed config of a run: YAML file + dotted ``a.b=c`` overrides, validated with pydantic.

Every section forbids unknown keys so a typo is an error naming the key and the keys that exist, instead of a
silently ignored setting. The resolved config (defaults filled in) is saved as ``run_dir/config.yaml``.
``base`` holds what every section shares; each section sits in the module of its area (``run``, ``model``,
``data``, ``rollout``, ``grading``, ``algorithm``, ``resources``); ``sections`` holds ``Config`` and the checks that
span sections, ``load`` the YAML/override loading, ``routing`` the reading of a dumped config by dotted path
(which graders its rows go to); this module is their public face.
"""

from reasoning_rl.config.algorithm import (
    GROUP_BASELINE_ESTIMATORS,
    AggMode,
    AlgorithmConfig,
    KLEstimator,
    LossConfig,
    OverlongConfig,
    RolloutCorrectionConfig,
)
from reasoning_rl.config.base import ConfigError
from reasoning_rl.config.data import DataConfig, RowConfig, SourceConfig
from reasoning_rl.config.grading import GradingConfig, RewardTermConfig
from reasoning_rl.config.load import (
    config_text,
    format_validation_error,
    load_config,
    parse_overrides,
    save_config,
)
from reasoning_rl.config.model import LoraConfig, ModelConfig, OptimConfig
from reasoning_rl.config.resources import ResourcesConfig
from reasoning_rl.config.rollout import RolloutConfig, SamplingParams
from reasoning_rl.config.run import EvalConfig, LoggingConfig, RunConfig, TrainerConfig
from reasoning_rl.config.sections import Config
from reasoning_rl.config.sft import SftConfig
from reasoning_rl.config.speculative import SpeculativeConfig

__all__ = [
    "GROUP_BASELINE_ESTIMATORS",
    "AggMode",
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvalConfig",
    "GradingConfig",
    "KLEstimator",
    "LoggingConfig",
    "LossConfig",
    "ModelConfig",
    "LoraConfig",
    "OptimConfig",
    "RewardTermConfig",
    "OverlongConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "ResourcesConfig",
    "RowConfig",
    "RunConfig",
    "SamplingParams",
    "SftConfig",
    "SourceConfig",
    "SpeculativeConfig",
    "TrainerConfig",
    "config_text",
    "format_validation_error",
    "load_config",
    "parse_overrides",
    "save_config",
]
