"""Read `lean --json` output and find our axiom report between its two sentinels.

The sentinels are fresh random strings per check and the report must sit on the line of our own
`#print axioms`, so text printed by the response (which comes earlier in the file) cannot pose as it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from graders.lean.source import LeanFile

_DEPENDS = re.compile(r"^'(?P<name>.+)' depends on axioms: \[(?P<axioms>.*)\]$", re.DOTALL)
_NO_AXIOMS = re.compile(r"^'(?P<name>.+)' does not depend on any axioms$")


class MalformedOutput(ValueError):
    """The binary did not produce `lean --json` messages; we cannot judge (a broken or wrong toolchain)."""


@dataclass(frozen=True, slots=True)
class Message:
    severity: str
    text: str
    line: int
    column: int

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "text": self.text, "line": self.line, "column": self.column}


def parse_messages(stdout: bytes) -> list[Message]:
    """One JSON object per line; anything else means the binary is not a working `lean --json`."""
    messages = []
    for number, raw in enumerate(stdout.decode("utf-8", errors="replace").splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
            pos = obj.get("pos") or {}
            messages.append(
                Message(
                    str(obj["severity"]), str(obj["data"]), int(pos.get("line", 0)), int(pos.get("column", 0))
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise MalformedOutput(
                f"line {number} of lean's output is not a JSON message: {raw[:200]!r}"
            ) from exc
    return messages


@dataclass(frozen=True, slots=True)
class AxiomReport:
    """What our probe printed: None when it did not run (the theorem failed, or the response stopped it)."""

    axioms: tuple[str, ...] | None
    spoofed: bool  # sentinel-looking messages elsewhere, or a report on the wrong line


def axiom_report(messages: list[Message], file: LeanFile) -> AxiomReport:
    begin, end = f"{file.sentinel}:begin", f"{file.sentinel}:end"
    begins = [i for i, m in enumerate(messages) if m.text == begin]
    ends = [i for i, m in enumerate(messages) if m.text == end]
    if len(begins) != 1 or len(ends) != 1 or ends[0] != begins[0] + 2:
        return AxiomReport(None, spoofed=len(begins) > 1 or len(ends) > 1)
    report = messages[begins[0] + 1]
    if report.line != file.axioms_line or report.severity != "information":
        return AxiomReport(None, spoofed=True)
    text = report.text.strip()
    if (m := _NO_AXIOMS.match(text)) and _same_name(m.group("name"), file.name):
        return AxiomReport((), spoofed=False)
    if (m := _DEPENDS.match(text)) and _same_name(m.group("name"), file.name):
        names = tuple(a.strip() for a in re.split(r",\s*", m.group("axioms").strip()) if a.strip())
        return AxiomReport(names, spoofed=False)
    return AxiomReport(None, spoofed=False)


def _same_name(printed: str, declared: str) -> bool:
    """Lean prints the full name; the statement may sit inside a namespace opened by the header."""
    return printed == declared or printed.endswith("." + declared)
