"""Test-only fault injection: SIGKILL this process at the N-th pass through a named phase, so a crash test
kills mid-generation, mid-update, mid-hand-off or mid-checkpoint by construction instead of by timing luck.

``RRL_FAULT=<phase>:<n>`` (unset in every real run: then ``fault_point`` is one dict lookup). The phases:
``generate`` (after an engine step of the continuous rollouts), ``update`` (after an optimizer step),
``handoff`` (after the first tensor of a weight hand-off went into the engine; on split placement, in the driver
once the training and rollout ranks' hand-off calls are issued, before any returned), ``checkpoint`` (after the
model state is written, before the checkpoint is complete). The kill is announced on stderr first.
``RRL_FAULT=<phase>:<n>:int`` sends SIGINT instead (a Ctrl-C at a named point, for the interrupt tests).
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "RRL_FAULT"
PHASES = ("generate", "update", "handoff", "checkpoint")
_seen: dict[str, int] = {}


def fault_point(phase: str) -> None:
    """Count one pass through ``phase``; SIGKILL this process if ``RRL_FAULT`` names this pass."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, rest = spec.partition(":")
    nth, _, kind = rest.partition(":")
    if name not in PHASES or not nth.isdigit() or int(nth) < 1 or kind not in ("", "int"):
        raise ValueError(f"{ENV}={spec!r}: expected <phase>:<n>[:int], phase one of {PHASES}, n >= 1")
    if name != phase:
        return
    _seen[phase] = _seen.get(phase, 0) + 1
    if _seen[phase] == int(nth) and kind == "int":
        sys.stderr.write(f"{ENV}: SIGINT at {phase} #{nth}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGINT)
    elif _seen[phase] == int(nth):
        sys.stderr.write(f"{ENV}: SIGKILL at {phase} #{nth}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
