"""Dotted ``key.path=value`` overrides -> a nested dict, each value read as the type its key takes.

A value is YAML (``true``, ``3``, ``[1, 2]``, ``{path: x}``), except where the key holds a string: there the text
is taken as written, so ``data.prompt_template={question} Answer:`` needs no YAML quoting (YAML would read
``{question}`` as a mapping). A quoted value (``'...'``/``"..."``) is still unquoted, and ``null`` still clears
an optional string.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel


class OverrideError(ValueError):
    """An override that is not ``key.path=value`` or whose value cannot be read; the message names it."""


def _members(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a union (``X | None`` too), else the annotation itself."""
    if get_origin(annotation) in (Union, types.UnionType):
        return get_args(annotation)
    return (annotation,)


def target_annotation(model: type[BaseModel], parts: list[str]) -> Any:
    """The annotation of the field a dotted path names (list indices and mapping keys walked into), else None."""
    current: Any = model
    for part in parts:
        step = None
        for member in _members(current):
            origin = get_origin(member)
            if isinstance(member, type) and issubclass(member, BaseModel):
                field = member.model_fields.get(part)
                step = field.annotation if field is not None else None
            elif origin is list and part.isdigit():
                step = get_args(member)[0]
            elif origin is dict:
                step = get_args(member)[1]
            if step is not None:
                break
        if step is None:
            return None
        current = step
    return current


def _is_text(member: Any) -> bool:
    return member is str or (
        get_origin(member) is Literal and all(isinstance(a, str) for a in get_args(member))
    )


def _value(raw: str, annotation: Any) -> Any:
    members = [m for m in _members(annotation) if m is not type(None)] if annotation is not None else []
    optional = annotation is not None and type(None) in _members(annotation)
    text = raw.strip()
    quoted = len(text) >= 2 and text[0] == text[-1] and text[0] in "'\""
    if members and all(_is_text(m) for m in members) and not quoted:
        return None if optional and text in ("null", "~") else raw
    try:
        value = yaml.safe_load(raw) if text else ""
    except yaml.YAMLError as exc:
        if any(_is_text(m) for m in members):
            return raw
        raise OverrideError(f"value is not valid YAML: {exc}") from None
    except RecursionError:  # a user's text past the parser's depth: one line, never a traceback
        raise OverrideError("value cannot be read: nested too deeply") from None
    except ValueError as exc:  # Python's cap on integer digits
        raise OverrideError(f"value cannot be read: {exc}") from None
    takes_mapping = any(
        get_origin(m) is dict or (isinstance(m, type) and issubclass(m, BaseModel)) for m in members
    )
    if isinstance(value, dict) and not takes_mapping and any(_is_text(m) for m in members):
        return raw  # "{question} ..." for a key that may be a string but never a mapping
    return value


def parse_overrides(overrides: list[str], model: type[BaseModel] | None = None) -> dict[str, Any]:
    """``["a.b=1", "c=x"]`` -> nested dict; with ``model``, values of string keys stay as written."""
    tree: dict[str, Any] = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise OverrideError(f"override {item!r} is not of the form key.path=value")
        parts = key.strip().split(".")
        try:
            value = _value(raw, target_annotation(model, parts) if model is not None else None)
        except OverrideError as exc:
            raise OverrideError(f"override {item!r:.200}: {exc}") from None
        node = tree
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise OverrideError(f"override {item!r} conflicts with an earlier override of {part!r}")
            node = child
        node[parts[-1]] = value
    return tree
