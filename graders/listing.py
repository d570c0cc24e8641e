"""What ``rrl graders list`` shows: every grader name, its version and the package that provides it."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from graders import registry


def installed_graders() -> list[dict[str, Any]]:
    """Load each grader once to read its version; a grader that fails to load is listed with the reason."""
    targets: dict[str, tuple[str, str]] = {
        n: (t, "reasoning-rl (built-in)") for n, t in registry.BUILTIN.items()
    }
    for ep in entry_points(group=registry.ENTRY_POINT_GROUP):
        provider = ep.dist.name if ep.dist is not None else "?"
        targets[ep.name] = (ep.value, provider)
    infos = []
    for name in registry.available():
        target, provider = targets.get(name, ("(registered in-process)", "-"))
        try:
            grader = registry.get(name)
            version, status = str(grader.version), "ok"
        except Exception as exc:  # listing must show broken plugins, not die on them
            version, status = None, f"cannot load: {type(exc).__name__}: {exc}"
        infos.append(
            {"name": name, "version": version, "provider": provider, "target": target, "status": status}
        )
    return infos
