"""The tools of a run (``rollout.tools``), built once from the config and handed to ``collect``: the tool
instances, the tokenizer that writes their turns, and the loop's budgets. ``None`` when a run has no tools."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reasoning_rl.config import ConfigError, RolloutConfig
from reasoning_rl.rollout.base import SamplingConfig
from reasoning_rl.rollout.multiturn import ToolRolloutConfig
from reasoning_rl.rollout.tool_calls import FormatName, Tokenizer
from reasoning_rl.tools.base import Tool
from reasoning_rl.tools.registry import UnknownToolError, describe, make
from sandboxes.types import SandboxError


@dataclass
class ToolSet:
    """``max_tokens`` of the request is the whole response budget; ``turn_max_tokens`` caps one generate call."""

    tools: dict[str, Tool]
    tokenizer: Tokenizer
    format: FormatName = "fenced"
    max_turns: int = 4
    turn_max_tokens: int | None = None
    timeout_s: float = 10.0

    @classmethod
    def from_config(cls, r: RolloutConfig, tokenizer: Tokenizer) -> ToolSet | None:
        if not r.tools:
            return None
        tools: dict[str, Tool] = {}
        try:
            for name in r.tools:
                try:
                    made = make(name, **r.tool_options.get(name, {}))
                except UnknownToolError as exc:  # a module:attr that does not load
                    raise ConfigError(f"rollout.tools: {exc}") from None
                except (TypeError, ValueError) as exc:  # a misspelled option, or one the tool does not take
                    raise ConfigError(f"rollout.tool_options.{name}: {exc}") from None
                except SandboxError as exc:  # its sandbox backend is unusable (no Docker daemon, no image)
                    raise ConfigError(
                        f"rollout.tools: the {name} tool cannot open its sandbox: {exc} "
                        f"(rollout.tool_options.{name}.sandbox picks the backend)"
                    ) from None
                if made.name in tools:
                    _close([made])
                    raise ConfigError(f"rollout.tools: two tools are named {made.name!r}")
                tools[made.name] = made  # calls name the tool (a module:attr spec's tool by its own name)
        except BaseException:
            _close(tools.values())
            raise
        return cls(tools, tokenizer, r.tool_format, r.max_turns, r.turn_max_tokens, r.tool_timeout_s)

    def rollout_config(self, sampling: SamplingConfig) -> ToolRolloutConfig:
        """The loop's config for one ``collect`` request (``sampling.n`` trajectories per prompt)."""
        per_call = min(self.turn_max_tokens or sampling.max_tokens, sampling.max_tokens)
        return ToolRolloutConfig(
            format=self.format,
            max_turns=self.max_turns,
            max_tokens=sampling.max_tokens,
            tool_budget_s=self.timeout_s,
            sampling=sampling.model_copy(update={"n": 1, "max_tokens": per_call}),
        )

    def close(self) -> None:
        """Release what the tools hold (the python tool's warm sandbox pool)."""
        _close(self.tools.values())


def prompt_tools(r: RolloutConfig) -> list[dict[str, Any]] | None:
    """The function schemas the chat template lists in the prompt for ``hermes`` calls (Qwen2.5 / Qwen3
    templates render them as ``<tools>`` in the system turn: how those models learn what they may call); None for
    ``fenced`` (TIR models such as Qwen2.5-Math are told to write ```python blocks, with no function list) and
    for runs without tools."""
    if not r.tools or r.tool_format != "hermes":
        return None
    try:
        return [describe(name) for name in r.tools]
    except UnknownToolError as exc:
        raise ConfigError(f"rollout.tools: {exc}") from None


def _close(tools: Any) -> None:
    for t in tools:
        close = getattr(t, "close", None)
        if close is not None:
            close()
