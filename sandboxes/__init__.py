"""Run untrusted programs with hard limits. Knows nothing about graders."""

from sandboxes.types import Limits, Mount, RunRequest, RunResult, Sandbox, SandboxError, StopReason

__all__ = ["Limits", "Mount", "RunRequest", "RunResult", "Sandbox", "SandboxError", "StopReason"]
