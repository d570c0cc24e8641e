"""``docs/config.md`` is generated from the config models and cannot go stale (issue 19)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from reasoning_rl.config import Config
from reasoning_rl.config.base import _Section
from reasoning_rl.config.reference import COMMAND, DOC_PATH, keys, main, render, undocumented


def test_committed_reference_matches_the_models() -> None:
    committed = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.is_file() else ""
    assert committed == render(), (
        f"docs/config.md is out of date with reasoning_rl/config/*.py: run `{COMMAND}`"
    )


def test_every_key_has_a_description() -> None:
    missing = undocumented()
    assert not missing, f"config keys without Field(description=...): {', '.join(missing)}"


def test_every_key_a_config_accepts_is_in_the_reference() -> None:
    """The leaves of a fully resolved config (as `--print-config` shows it) are exactly the documented keys."""
    data = {"train": {"path": "d.jsonl"}, "val": {"generator": "arithmetic"}}
    grading = {"rewards": [{"grader": "math", "weight": 1.0}]}  # a list of sections: one item shows its keys
    cfg = Config.model_validate({"model": {"path": "m"}, "data": data, "grading": grading})

    def leaves(value: object, prefix: str) -> set[str]:
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            return {name for item in value for name in leaves(item, f"{prefix.rstrip('.')}[].")}
        if isinstance(value, dict) and prefix.rstrip(".") not in plain_dicts:
            return {name for k, v in value.items() for name in leaves(v, f"{prefix}{k}.")}
        return {prefix.rstrip(".")}

    names = [k.name for k in keys()]
    plain_dicts = {k.name for k in keys() if k.type.startswith("dict[")}
    sections = {n for n in names if any(m.startswith((f"{n}.", f"{n}[].")) for m in names)}
    assert leaves(cfg.model_dump(mode="json"), "") == set(names) - sections
    page = DOC_PATH.read_text(encoding="utf-8")
    for name in ("data.train[].path", "algorithm.rollout_correction.tis_cap", "resources.placement"):
        assert f"| `{name}` |" in page


class _Inner(_Section):
    depth: int = Field(default=3, ge=1, le=9, description="How deep.")


class _Outer(_Section):
    mode: Literal["a", "b"] = Field(default="a", description="Which mode.")
    inner: _Inner = Field(default_factory=_Inner, description="Nested.")
    items: list[_Inner] = Field(default_factory=list, description="Listed.")
    names: dict[str, int] | None = None
    path: str = Field(description="Needed.")


def test_keys_name_type_default_and_constraints() -> None:
    got = {k.name: (k.type, k.default, k.description) for k in keys(_Outer, "x.")}
    assert got == {
        "x.mode": ('"a" | "b"', '"a"', "Which mode."),
        "x.inner": ("_Inner", "(keys below)", "Nested."),
        "x.inner.depth": ("int (>= 1, <= 9)", "3", "How deep."),
        "x.items": ("list[_Inner]", "[]", "Listed."),
        "x.items[].depth": ("int (>= 1, <= 9)", "3", "How deep."),
        "x.names": ("dict[str, int] | None", "null", None),  # no description: undocumented() would name it
        "x.path": ("str", "required", "Needed."),
    }


def test_check_mode_fails_on_a_stale_file_and_names_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "config.md"
    assert main(["--check", "--out", str(out)]) == 1  # missing
    assert main(["--out", str(out)]) == 0 and out.read_text(encoding="utf-8") == render()
    assert main(["--check", "--out", str(out)]) == 0
    out.write_text(render().replace("Samples per prompt", "Samples"), encoding="utf-8")
    assert main(["--check", "--out", str(out)]) == 1
    assert COMMAND in capsys.readouterr().err
