"""What ``rrl tools list`` shows: every tool name ``rollout.tools`` accepts, where it comes from, and what it
does (as ``rrl graders list`` does for graders)."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from reasoning_rl.registry import TOOLS


def installed_tools() -> list[dict[str, Any]]:
    """Load each tool's implementation once (not an instance: the python tool would open a sandbox) to read its
    description; one that fails to load is listed with the reason."""
    targets: dict[str, tuple[str, str]] = {
        name: (module, "reasoning-rl (built-in)") for name, module in TOOLS.builtins.items()
    }
    for ep in entry_points(group=TOOLS.group):
        targets[ep.name] = (ep.value, ep.dist.name if ep.dist is not None else "?")
    infos = []
    for name in TOOLS.names():
        target, provider = targets.get(name, ("(registered in-process)", "-"))
        try:
            description, status = str(getattr(TOOLS.get(name), "description", "") or ""), "ok"
        except Exception as exc:  # listing must show broken plugins, not die on them
            description, status = "", f"cannot load: {type(exc).__name__}: {exc}"
        first = description.strip().splitlines()[0] if description.strip() else ""
        infos.append(
            {"name": name, "provider": provider, "target": target, "description": first, "status": status}
        )
    return infos
