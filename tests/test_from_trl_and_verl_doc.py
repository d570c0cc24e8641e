"""docs/from-trl-and-verl.md maps TRL's and verl's parameters to ours (issue 47): every key it names on our side
is a real config key, so a rename breaks this test rather than a reader's run."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTIONS = (
    "run",
    "model",
    "data",
    "rollout",
    "algorithm",
    "optim",
    "grading",
    "trainer",
    "eval",
    "resources",
)


def test_every_key_of_ours_is_in_the_config_reference() -> None:
    doc = (REPO / "docs" / "from-trl-and-verl.md").read_text()
    known = set(re.findall(r"^\| `([a-z_.]+)` \|", (REPO / "docs" / "config.md").read_text(), re.M))
    ours = []
    for line in doc.splitlines():
        cells = line.split("|")
        if len(cells) >= 4 and not set(cells[1].strip()) <= set("-"):
            ours += re.findall(rf"`((?:{'|'.join(SECTIONS)})\.[a-z_.]+)", cells[2])
    assert len(ours) >= 40
    missing = sorted({k for k in ours if k not in known})
    assert not missing, missing
