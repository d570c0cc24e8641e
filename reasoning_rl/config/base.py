"""What every config section shares: unknown keys refused, booleans never taken for numbers."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

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
