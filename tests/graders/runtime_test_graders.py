"""Graders with deliberate faults, loaded by worker processes through "module:attr" grader specs.

Tests build the spec from ``__name__`` so it works however pytest put this directory on sys.path.
"""

from __future__ import annotations

import os
import time
from typing import Any

from graders.types import Grade


class EchoGrader:
    """Correct iff the response equals the ground truth; ``sleep_s`` / ``hang`` / ``boom`` options inject faults."""

    name = "echo"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if options.get("hang"):
            while True:  # never returns, like a SymPy blow-up
                time.sleep(0.05)
        if options.get("boom"):
            raise ValueError(f"boom on {response!r}")
        flaky = options.get("flaky_marker")
        if flaky and not os.path.exists(flaky):
            open(flaky, "w").close()
            return Grade.error("sandbox_error: container failed to start", retryable=True)
        if options.get("sleep_s"):
            time.sleep(float(options["sleep_s"]))
        pid = os.getpid()
        if response == str(ground_truth):
            return Grade.correct("match", answer=response, pid=pid)
        return Grade.incorrect("mismatch", answer=response, pid=pid)


class SelfKillingGrader:
    """SIGKILLs its own worker the first time it sees a response whose marker file does not exist yet."""

    name = "selfkill"
    version = "1"

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        marker = options["marker"]
        if not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write(str(os.getpid()))
            os.kill(os.getpid(), 9)
        return Grade.correct("survived retry")


class SlowStartGrader:
    """Needs 1.5 s to start (like a grader importing SymPy in helpers); its ``warm`` hook does that up front."""

    name = "slowstart"
    version = "1"

    def __init__(self) -> None:
        self.warmed = False

    def warm(self) -> None:
        time.sleep(1.5)
        self.warmed = True

    def grade(self, response: str, ground_truth: Any, **options: Any) -> Grade:
        if not self.warmed:
            self.warm()
        return Grade.correct("warm")
