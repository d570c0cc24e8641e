"""Loading a config: YAML file + dotted overrides, validation errors that name the key."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from reasoning_rl.config.base import ConfigError
from reasoning_rl.config.sections import Config
from reasoning_rl.overrides import OverrideError
from reasoning_rl.overrides import parse_overrides as read_overrides


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
        key = ".".join(str(p) for p in loc) or "config"
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(Config, loc)
            hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
            lines.append(f"  {key}: unknown key{hint}")
        elif e["type"] == "missing":
            lines.append(f"  {key}: required key is missing")
        elif e["type"] == "value_error" and isinstance(e.get("input"), dict):
            # a check across a section's (or sections') fields: its message names them; the input is the whole
            # section or config, hundreds of characters that say nothing more
            lines.append(f"  {key}: {e['msg'].removeprefix('Value error, ')}")
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


def load_config(
    path: str | Path | None, overrides: list[str] | None = None, *, base: dict[str, Any] | None = None
) -> Config:
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
        except RecursionError:
            raise ConfigError(f"{p}: cannot be read: nested too deeply") from None
        except ValueError as exc:  # Python's cap on integer digits
            raise ConfigError(f"{p}: cannot be read: {exc}") from None
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
            raise ConfigError(
                f"override {prefix}{key}.{min(value, key=int)}=...: {prefix}{key} has no items to "
                f"index (it is empty or unset); set the whole list, e.g. {prefix}{key}=[{{path: FILE}}]"
            )
        if indexed and isinstance(current, list):
            items = list(current)
            for idx, sub in value.items():
                i = int(idx)
                if i >= len(items):
                    raise ConfigError(
                        f"override index {prefix}{key}.{i} is out of range (list has {len(items)} items)"
                    )
                items[i] = (
                    _merge(items[i], sub) if isinstance(sub, dict) and isinstance(items[i], dict) else sub
                )
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
