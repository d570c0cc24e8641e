"""Name -> implementation registries for the trainer's pluggable parts (rollout engines, advantage estimators,
rollout tools).

Honestly open: a name is valid when it is built in, registered in-process (``@ENGINES.register("mine")``)
or published by an installed package under the registry's entry-point group, and the config validates its
names against exactly that set. Torch-free, so the config can check names without loading any implementation.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """``builtins`` maps each built-in name to the module whose import registers it (loaded on first use)."""

    def __init__(self, what: str, group: str, builtins: dict[str, str]) -> None:
        self.what = what
        self.group = group
        self.builtins = dict(builtins)
        self._registered: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name`` (a built-in module or a plugin calls it on import)."""

        def deco(obj: T) -> T:
            self._registered[name] = obj
            return obj

        return deco

    def unregister(self, name: str) -> None:
        self._registered.pop(name, None)

    def _entry_points(self) -> dict[str, Any]:
        return {ep.name: ep for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every name that can be asked for (loaded or not)."""
        return sorted(set(self.builtins) | set(self._registered) | set(self._entry_points()))

    def check(self, name: str) -> str:
        """``name`` if it can be asked for, else ValueError listing the names that exist."""
        if name not in self._registered and name not in self.builtins and name not in self._entry_points():
            raise ValueError(
                f"unknown {self.what} {name!r}: expected one of {', '.join(map(repr, self.names()))} "
                f"(or register one: entry point group {self.group!r})"
            )
        return name

    def get(self, name: str) -> T:
        """The implementation registered as ``name`` (imports its built-in module or entry point once)."""
        if name not in self._registered:
            if name in self.builtins:
                importlib.import_module(self.builtins[name])
            elif name in (eps := self._entry_points()):
                self._registered[name] = eps[name].load()
        if name not in self._registered:
            self.check(name)  # unknown: the error lists what exists
            raise ValueError(
                f"{self.what} {name!r}: its module {self.builtins.get(name)} did not register it"
            )
        return self._registered[name]


# The registries themselves, declared here (torch-free) so config validation sees them.
ENGINES: Registry[Callable[..., Any]] = Registry(
    "rollout engine",
    "reasoning_rl.engines",
    {"vllm": "reasoning_rl.rollout.vllm_cores", "hf": "reasoning_rl.rollout.hf_engine"},
)
ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "advantage estimator",
    "reasoning_rl.advantages",
    {
        name: "reasoning_rl.algorithms.advantages"
        for name in ("grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline")
    },
)
# Tools are registered as a ``Tool`` instance or a factory called with the tool's options (reasoning_rl.tools.make).
TOOLS: Registry[Any] = Registry(
    "tool",
    "reasoning_rl.tools",
    {"python": "reasoning_rl.tools.python_tool", "calculator": "reasoning_rl.tools.calculator"},
)


def is_tool_spec(name: str) -> bool:
    """``module:attr`` (a ``@tool`` function, a ``Tool`` instance or a class in an importable module, no
    packaging needed, as graders' ``module:Class``), rather than a registered name."""
    return ":" in name


def check_tool_name(name: str) -> str:
    """``name`` if it can be asked for: a registered name, or a well-formed ``module:attr`` spec (imported when
    the tool is made, so config validation stays import-free). Here, below both the config and the tools."""
    if is_tool_spec(name):
        module, _, attr = name.partition(":")
        if not module or not attr or ":" in attr:
            raise ValueError(f"tool spec {name!r}: expected module:attr (e.g. my_tools:lookup)")
        return name
    return TOOLS.check(name)
