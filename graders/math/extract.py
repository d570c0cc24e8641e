"""Find the answer a response commits to, under a named extraction mode.

``strict`` (rewards): only ``\\boxed{}``/``\\fbox{}`` answers after the last ``</think>`` count.
``lenient`` (evaluation): the last group of boxes, else "The answer is ...", "Answer: ...", GSM8K ``#### n``,
the last maths segment, a final bare number, or an MCQ letter (words after "The answer is" are no answer: "The
answer is obvious" falls through to the later rules). All scanning here is linear in the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from graders.gsm8k_rows import NotAGold, gsm8k_gold

Mode = Literal["strict", "lenient"]
MODES: tuple[Mode, ...] = ("strict", "lenient")

_BOX_CMDS = ("\\boxed", "\\fbox")
MAX_BOXES = 1000  # more boxes than this is not an answer; the grader says so instead of judging them all
TAIL_CHARS = 20_000  # lenient fallbacks look at the end of the response only (answers live there)
SENTENCE_CHARS = 2_000
MAX_ANCHORS = 20
_GROUP_GAP = re.compile(
    r"^[\s$,;.&]*(?:\\[\]\)\[\(]|[A-Za-z](?:_\{?\w+\}?)?\s*=|\\quad|\\qquad|\\text\{[^{}]{0,40}\}|\\,|\\ |and|or|,|;|\$|\s)*[\s$,;.&]*$"
)


@dataclass(frozen=True, slots=True)
class Extraction:
    """The candidate answer strings and the rule that found them (``answers`` empty: nothing found)."""

    answers: tuple[str, ...]
    rule: str


class UnclosedThinkError(ValueError):
    """The response opened ``<think>`` and never closed it: it has no final answer."""


def after_think(response: str) -> str:
    """The text after the last ``</think>``; raises when a ``<think>`` is left open."""
    lower = response.lower()
    close = lower.rfind("</think>")
    opened = lower.rfind("<think>")
    if opened > close:
        raise UnclosedThinkError("unclosed <think>")
    return response[close + len("</think>") :] if close >= 0 else response


@dataclass(frozen=True, slots=True)
class Box:
    start: int
    end: int
    content: str


def find_boxes(text: str) -> list[Box]:
    """Every ``\\boxed{...}``, ``\\fbox{...}`` and ``\\boxed 5`` in order, with nested braces matched."""
    boxes: list[Box] = []
    i = 0
    n = len(text)
    # Next hit per command, refreshed only when passed: one scan of the text per command, not per box.
    next_hit = {cmd: text.find(cmd) for cmd in _BOX_CMDS}
    while len(boxes) <= MAX_BOXES:
        for cmd, hit in next_hit.items():
            if 0 <= hit < i:
                next_hit[cmd] = text.find(cmd, i)
        hits = [(pos, cmd) for cmd, pos in next_hit.items() if pos >= 0]
        if not hits:
            return boxes
        pos, cmd = min(hits)
        j = pos + len(cmd)
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == "{":
            depth, k = 0, j
            while k < n:
                c = text[k]
                if c == "\\" and k + 1 < n:
                    k += 2
                    continue
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        break
                k += 1
            if k >= n:  # unbalanced: the box never closes, so it commits to nothing
                return boxes
            boxes.append(Box(pos, k + 1, text[j + 1 : k]))
            i = k + 1
        elif j > pos + len(cmd) and j < n and text[j] not in "\\$":  # "\boxed 5": one token
            m = re.match(r"[^\s$]+", text[j:])
            token = m.group(0) if m else ""
            boxes.append(Box(pos, j + len(token), token))
            i = j + len(token)
        else:
            i = j
    return boxes


def last_box_group(text: str, boxes: list[Box]) -> list[Box]:
    """The final run of boxes separated only by connectors (``, ``, ``\\quad\\text{and}\\quad``)."""
    group = [boxes[-1]]
    for prev in reversed(boxes[:-1]):
        gap = text[prev.end : group[0].start]
        if len(gap) > 80 or "\n\n" in gap or not _GROUP_GAP.match(gap):
            break
        group.insert(0, prev)
    return group


_ANCHOR = re.compile(
    r"(?:final answer|the answer|answer)\s*(?:is|:|=)?\s*(?:(?:is|:)\s*)?",
    re.I,
)
_GSM = re.compile(r"####\s*([^\n]+)")
# (opener, closer, inline): display maths may span lines; inline $...$ and \(...\) may not.
_MATH_KINDS = (("$$", "$$", False), ("\\[", "\\]", False), ("\\(", "\\)", True), ("$", "$", True))
_NUMBER = re.compile(
    r"(?<![A-Za-z\d.,])(?:-?\\frac\{\d+\}\{\d+\}|-?\d+\s*/\s*\d+(?!\d|\.\d)"
    r"|-?(?:\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+(?!\d)|\d+)(?:[.,]\d+)?|-?\.\d+)(?!\d)"
)
_MCQ = re.compile(r"(?:^|[\s(*:])\(?([A-E])\)?(?=$|[\s).,*:])")
# Plain words after an anchor (two letters or more each, no maths): prose, not an answer, unless a word names a
# number. A gold written in words (``\text{odd}``) is still answered by a box.
_PROSE = re.compile(r"[A-Za-z]{2,}(?:[\s,;'-]+[A-Za-z]{2,})*")
MATH_WORDS = frozenset({"pi", "infinity", "inf", "infty"})
_CONNECTORS = re.compile(r"[\s\\\"',.;]*(?:(?:and|or|,)[\s\\\"',.;]*)*")
_HOPE = re.compile(r"\s*I hope it is correct.*$", re.I | re.S)


@dataclass(frozen=True, slots=True)
class Segment:
    start: int
    end: int
    content: str


def math_segments(text: str) -> list[Segment]:
    """The ``$$..$$``, ``\\[..\\]``, ``\\(..\\)`` and ``$..$`` pieces of ``text``, left to right.

    Linear: each delimiter's next position is cached and only searched forward, so a response made of
    thousands of unclosed ``\\[`` costs one pass, not one pass per opener (a regex with ``.+?`` would).
    """
    segments: list[Segment] = []
    cache: dict[str, int] = {}

    def next_at(token: str, start: int) -> int:
        pos = cache.get(token, -2)
        if pos == -2 or (pos != -1 and pos < start):
            pos = text.find(token, start)
            cache[token] = pos
        return pos

    dead: set[str] = set()
    i = 0
    while True:
        hits = []
        for opener, closer, inline in _MATH_KINDS:
            if opener not in dead and (pos := next_at(opener, i)) >= 0:
                hits.append((pos, -len(opener), opener, closer, inline))
        if not hits:
            return segments
        pos, _, opener, closer, inline = min(hits)
        body = pos + len(opener)
        if opener == "$" and pos > 0 and text[pos - 1] == "\\":  # an escaped dollar is currency
            i = pos + 1
            continue
        end = next_at(closer, body)
        while closer == "$" and end > 0 and text[end - 1] == "\\":
            end = next_at(closer, end + 1)
        if end < 0:  # no closer anywhere after: no later opener of this kind can close either
            dead.add(opener)
            i = pos + 1
            continue
        newline = next_at("\n", body) if inline else -1
        if inline and 0 <= newline < end:
            i = pos + len(opener)
            continue
        segments.append(Segment(pos, end + len(closer), text[body:end]))
        i = end + len(closer)


def _strip_maths(text: str, segments: list[Segment]) -> tuple[str, str]:
    """(the prose without the maths, the text with delimiters removed)."""
    prose, plain, last = [], [], 0
    for seg in segments:
        prose.append(text[last : seg.start])
        plain.append(text[last : seg.start] + seg.content)
        last = seg.end
    prose.append(text[last:])
    plain.append(text[last:])
    return "".join(prose), "".join(plain)


def _sentence_answer(sentence: str) -> str | None:
    """The answer inside the sentence following an anchor such as "The final answer is"."""
    sentence = _HOPE.sub("", sentence).strip()
    sentence = re.sub(r"^(?:\\?[\"'`*]|\s)+", "", sentence)
    segments = math_segments(sentence)
    if segments and segments[0].start == 0:
        line_end = sentence.find("\n", segments[0].end)
        line_end = len(sentence) if line_end < 0 else line_end
        prose, plain = _strip_maths(sentence[:line_end], [s for s in segments if s.end <= line_end])
        if _CONNECTORS.fullmatch(prose):  # "$12$ and $13$": several maths pieces joined by words
            return plain.strip().rstrip(" .\\\"'")
        return segments[0].content
    sentence = re.sub(r"\s*(?:<\|.*|\[Note.*)$", "", sentence, flags=re.S)
    head = re.split(r"(?<![\d\\])\.\s|\n", sentence + " ", maxsplit=1)[0].strip()
    if not head:
        return None
    tail = re.split(r"\bis\b", head)[-1].strip()
    segments = math_segments(tail)
    if segments:
        return segments[-1].content
    numbers = _NUMBER.findall(tail)
    if numbers:
        return numbers[-1]
    tail = tail.rstrip(".").strip()
    if _PROSE.fullmatch(tail) and tail.lower() not in MATH_WORDS:
        return None  # "The answer is obvious": words are no answer (a variable, a letter or `pi` is)
    return tail or None


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in pattern.finditer(text):  # noqa: B007 - we want the final match
        pass
    return last


def extract(response: str, mode: Mode) -> Extraction:
    """Candidate answers of ``response`` (think-tags already honoured by the caller)."""
    boxes = find_boxes(response)
    if mode == "strict":
        if len(boxes) > MAX_BOXES:
            return Extraction((), f"more than {MAX_BOXES} boxed answers")
        if not boxes:
            return Extraction((), "no boxed answer")
        return Extraction(tuple(b.content for b in boxes), "boxed")
    if len(boxes) > MAX_BOXES:
        return Extraction((), f"more than {MAX_BOXES} boxed answers")
    if len(response) > TAIL_CHARS:
        response = response[-TAIL_CHARS:]
        boxes = find_boxes(response)
    anchors = list(_ANCHOR.finditer(response))
    if boxes:
        final = [a for a in anchors if a.start() > boxes[-1].end and "final" in a.group(0).lower()]
        found = (
            _sentence_answer(response[final[-1].end() : final[-1].end() + SENTENCE_CHARS]) if final else None
        )
        if found:  # "\boxed{255} ... Final Answer: The final answer is $10,455$": the later commitment wins
            return Extraction((found,), "final-answer phrase after the last box")
        return Extraction(tuple(b.content for b in last_box_group(response, boxes)), "boxed (last group)")
    for anchor in reversed(anchors[-MAX_ANCHORS:]):
        found = _sentence_answer(response[anchor.end() : anchor.end() + SENTENCE_CHARS])
        if found:
            return Extraction((found,), "answer phrase")
    if gsm := _GSM.findall(response):
        return Extraction((gsm[-1].strip(),), "#### marker")
    segments = math_segments(response)
    number = _last(_NUMBER, response)
    if segments and (not number or segments[-1].end >= number.end()):
        return Extraction((segments[-1].content,), "last maths segment")
    if number:
        return Extraction((number.group(0),), "last number")
    mcq = _MCQ.findall(response)
    if mcq:
        return Extraction((mcq[-1],), "MCQ letter")
    return Extraction((), "no answer found")


def gold_answers(ground_truth: str) -> tuple[str, ...]:
    """The reference answer(s): usually the bare string, sometimes a worked solution with boxes in it, or
    GSM8K's worked solution ending in ``#### N`` (the loaders' one rule: ``graders.gsm8k_rows``)."""
    try:
        final = gsm8k_gold(ground_truth)
    except NotAGold:
        final = None  # left as it is: ``prose_gold`` then makes it an error, never an incorrect
    if final is not None:
        return (final,)
    boxes = find_boxes(ground_truth)
    if boxes:  # a reference lists its parts: every box counts ("\boxed{1} papers and \boxed{2} bins")
        return tuple(dict.fromkeys(b.content for b in boxes))
    if len(ground_truth) > 200 or re.search(r"final answer is", ground_truth, re.I):
        found = extract(ground_truth, "lenient")
        if found.answers:
            return found.answers
    segments = math_segments(ground_truth)
    if len(segments) > 1:  # "$1$ and $2$ and $3$"
        return (_strip_maths(ground_truth, segments)[1],)
    return (ground_truth,)


# A word of prose: two or more letters, not a LaTeX command's name (``\\frac``) nor part of a longer token.
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}(?![A-Za-z])")
_PROSE_WORDS = 4


def prose_gold(gold: str) -> str | None:
    """Why a reference answer is prose no prediction can equal (a worked solution, a sentence with numbers
    in it), else None. A gold no answer can match must grade ``error``: as ``incorrect`` it would silently
    score every right answer 0. Text answers (no digit) and units (``5\\text{ cm}``) are answers."""
    if "<<" in gold and ">>" in gold:
        return "it holds GSM8K calculator notes (<<...>>): a worked solution, not a final answer"
    if "####" in gold:
        return "it holds GSM8K's '####' line without a plain number at its end"
    if any(c.isdigit() for c in gold) and len(_WORD.findall(gold)) >= _PROSE_WORDS:
        return "it reads as a sentence with numbers in it, not a final answer"
    return None
