"""Read `lean --json` output, and the axiom report of the trusted audit run (see ``_driver.py``).

The report comes from a separate Lean process that only imports the compiled proof, after every process of
the response's run is dead: its output is trusted, so it needs no sentinel and carries none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

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


def axiom_report(messages: list[Message], name: str) -> tuple[str, ...] | None:
    """The axioms the trusted audit run printed for theorem ``name``; None when it printed no such report."""
    reports = [m for m in messages if m.severity == "information"]
    if len(reports) != 1:
        return None
    text = reports[0].text.strip()
    if (m := _NO_AXIOMS.match(text)) and _same_name(m.group("name"), name):
        return ()
    if (m := _DEPENDS.match(text)) and _same_name(m.group("name"), name):
        return tuple(a.strip() for a in re.split(r",\s*", m.group("axioms").strip()) if a.strip())
    return None


def _same_name(printed: str, declared: str) -> bool:
    """Lean prints the full name, with «guillemets» only where a component needs them."""
    return printed.replace("«", "").replace("»", "") == declared.replace("«", "").replace("»", "")
