"""``docs/config.md``: every config key (dotted name, type, default, description) read from the pydantic models.

One writer so the reference cannot drift from the code: ``python -m reasoning_rl.config.reference`` rewrites the
file, ``--check`` exits 1 when the committed file differs (the test suite runs the same comparison). The output
depends only on the models (field order as declared, no timestamps), so regenerating after a merge is safe.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from reasoning_rl.config.sections import Config

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "config.md"
COMMAND = "python -m reasoning_rl.config.reference"
_CONSTRAINTS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "min items"))


@dataclass(frozen=True)
class Key:
    """One leaf of the config tree as the reference shows it."""

    name: str  # dotted, list items as ``[]``: ``data.train[].path``
    type: str
    default: str
    description: str | None


def _section_of(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The section model a field holds (directly, optional, or as list items) and the name suffix for it."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, ""
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    if origin in (Union, types.UnionType) and len(args) == 1:
        return _section_of(args[0])
    if origin is list and len(args) == 1:
        found = _section_of(args[0])
        return (found[0], "[]" + found[1]) if found is not None else None
    return None


def type_name(annotation: Any) -> str:
    """A short, stable spelling of a field's type (``int | None``, ``"a" | "b"``, ``list[str]``)."""
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation.__name__
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_name(a) for a in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def _constraints(field: FieldInfo) -> str:
    found = []
    for meta in field.metadata:
        for attr, symbol in _CONSTRAINTS:
            value = getattr(meta, attr, None)
            if value is not None:
                found.append(f"{symbol} {value}")
    return ", ".join(found)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "required"
    return json.dumps(value)


def keys(model: type[BaseModel] = Config, prefix: str = "") -> list[Key]:
    """Every key under ``model``, depth first in declaration order. A field holding a section (or a list of
    them) is a key too, followed by the section's keys; the top-level sections become headings instead."""
    out: list[Key] = []
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        section = _section_of(field.annotation)
        kind = type_name(field.annotation)
        limits = _constraints(field)
        nested = section is not None and section[1] == ""  # a section's default is its keys' defaults
        default = "(keys below)" if nested and not field.is_required() else _default(field)
        if prefix or section is None:
            out.append(Key(dotted, f"{kind} ({limits})" if limits else kind, default, field.description))
        if section is not None:
            sub, suffix = section
            out.extend(keys(sub, f"{dotted}{suffix}."))
    return out


def undocumented() -> list[str]:
    """Keys (top-level sections included) without a ``Field(description=...)``: the reference needs one each."""
    missing = [name for name, field in Config.model_fields.items() if not (field.description or "").strip()]
    return missing + [key.name for key in keys() if not (key.description or "").strip()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _sections(model: type[BaseModel] = Config) -> list[tuple[str, str, str]]:
    """Top-level sections: name, whether the section must be given, and its description."""
    out = []
    for name, field in model.model_fields.items():
        if _section_of(field.annotation) is not None:
            out.append((name, "required" if field.is_required() else "optional", field.description or ""))
    return out


def render() -> str:
    """The whole ``docs/config.md`` text."""
    lines = [
        "# Config reference",
        "",
        f"<!-- Generated by `{COMMAND}` from reasoning_rl/config/*.py; do not edit by hand. -->",
        "",
        "Every key of a run's config (`rrl train CONFIG.yaml key.path=value ...`), with its type, default and "
        "meaning. Keys are dotted paths; `[]` marks the items of a list (`data.train[].path` is the `path` of each "
        "`data.train` source). Unknown keys are an error naming the key. An override whose value is a mapping "
        "merges into the file's mapping key by key, at every depth (`grading.options={math: {mode: strict}}` sets "
        "`math.mode` and keeps the file's other graders' options and `math`'s other keys); any other value, a "
        "list too (`data.train=[...]`), replaces the file's. To drop a mapping's key, edit the file. "
        "`rrl train CONFIG.yaml --print-config` "
        "prints a config with every default filled in. Regenerate this file with "
        f"`{COMMAND}` after changing a config model (a test compares it with the models).",
        "",
    ]
    all_keys = keys()
    for name, required, description in _sections():
        lines.extend([f"## `{name}` ({required})", "", description, ""])
        lines.append("| key | type | default | description |")
        lines.append("|---|---|---|---|")
        for key in all_keys:
            if key.name.split(".")[0].removesuffix("[]") == name:
                row = (f"`{key.name}`", f"`{key.type}`", f"`{key.default}`", key.description or "")
                lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from the models")
    parser.add_argument("--out", type=Path, default=DOC_PATH, help=f"file to write (default: {DOC_PATH})")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
        if current != text:
            print(
                f"{args.out} is out of date with reasoning_rl/config/*.py; run `{COMMAND}`", file=sys.stderr
            )
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(keys())} keys)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
