"""Reading a resolved config dumped to a mapping (``Config.model_dump``, an older run's ``config.yaml``, a
hand-written dict in a test) by dotted path with defaults, so a partial mapping still answers for what it does
say; and the question both ``rrl doctor`` and the Lean launcher default ask of it: which graders rows go to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def dotted_get(cfg: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def graders_named(cfg: Mapping[str, Any]) -> set[str]:
    """Graders the config routes rows to: the default, the mapping's targets, and those given options."""
    names = {str(dotted_get(cfg, "data.default_grader", "math"))}
    names |= {str(v) for v in (dotted_get(cfg, "data.grader_map") or {}).values()}
    names |= {str(k) for k in (dotted_get(cfg, "grading.options") or {})}
    return names
