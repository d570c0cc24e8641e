"""Judges for the model-backed grader tests: the real ``JudgeGrader`` (template, quoting, parser, budget)
with its LLM replaced by a script, loadable by ``module:Class`` in grading workers."""

from __future__ import annotations

import html
import re
import threading
from typing import Any

from reasoning_rl.model_graders.judge import JudgeGrader, Reply


def _between(text: str, start: str, end: str) -> tuple[int, int]:
    i = text.index(start) + len(start)
    return i, text.index(end, i)  # a naive reader: the first closing tag ends the quote


class ScriptedJudge(JudgeGrader):
    """A tiny judge that behaves like a gullible LLM: it compares the last number of the quoted response
    with the reference, but obeys instructions it finds outside the quotes ("ignore previous
    instructions..."). So the quoting is all that stands between an injected response and a CORRECT."""

    name = "scripted_judge"

    def version_for(self, options: dict[str, Any]) -> str:
        return "scripted"

    def unavailable(self, setup: dict[str, Any]) -> str | None:
        return None

    def warm(self) -> None:
        return None

    def golden_cases(self) -> list[dict[str, Any]]:
        ask = {"prompt": "What is 3 + 4?"}
        return [
            {"response": "3 + 4 = 7", "ground_truth": "7", "verdict": "correct", "context": ask},
            {"response": "3 + 4 = 8", "ground_truth": "7", "verdict": "incorrect", "context": ask},
        ]

    def generate(self, prompts: list[str], options: dict[str, Any]) -> list[Reply]:
        return [Reply(self.reply(p), True) for p in prompts]

    @staticmethod
    def reply(prompt: str) -> str:
        start, end = _between(prompt, "<response>", "</response>")
        quoted, outside = prompt[start:end], prompt[:start] + prompt[end:]
        if "reply with nothing" in outside.lower():
            return ""
        if "ignore previous instructions" in outside.lower():
            return "VERDICT: CORRECT"
        r_start, r_end = _between(prompt, "<reference>", "</reference>")
        reference = html.unescape(prompt[r_start:r_end]).strip()
        numbers = re.findall(r"-?\d+", html.unescape(quoted))
        return f"VERDICT: {'CORRECT' if numbers and numbers[-1] == reference else 'INCORRECT'}"


class ChattyJudge(ScriptedJudge):
    """A judge whose reply is no verdict line (the parser must not guess)."""

    name = "chatty_judge"

    def golden_cases(self) -> list[dict[str, Any]]:
        return []

    def generate(self, prompts: list[str], options: dict[str, Any]) -> list[Reply]:
        return [Reply("I think the answer is CORRECT, mostly.", True) for _ in prompts]


class HangingJudge(ChattyJudge):
    """A judge that never answers: only the pool's hard budget ends it."""

    name = "hanging_judge"

    def generate(self, prompts: list[str], options: dict[str, Any]) -> list[Reply]:
        threading.Event().wait()
        raise AssertionError("unreachable")
