"""The doctor's checks, one module per area; importing this package registers them in order."""

from reasoning_rl.doctor_checks import (  # noqa: F401  (registration)
    accelerator,
    cluster,
    engines,
    memory,
    python_env,
    services,
)
from reasoning_rl.doctor_checks.base import CHECKS, CheckResult, Requirements, register
from reasoning_rl.doctor_checks.requirements import requirements_from_config

__all__ = ["CHECKS", "CheckResult", "Requirements", "register", "requirements_from_config"]
