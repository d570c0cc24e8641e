"""Take the program out of a model response: a fenced code block (last by default) or the raw text."""

from __future__ import annotations

import re
from typing import Literal

ExtractMode = Literal["last_block", "first_block", "longest_block", "raw"]
EXTRACT_MODES: tuple[ExtractMode, ...] = ("last_block", "first_block", "longest_block", "raw")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
_OTHER_LANGS = {"text", "txt", "output", "console", "bash", "sh", "shell", "json", "plaintext", "cpp", "c++",
                "java", "c", "go", "rust", "javascript", "js"}


def extract_code(response: str, mode: ExtractMode = "last_block") -> str | None:
    """The chosen code block, ignoring blocks tagged with another language; None when there is none."""
    if mode == "raw":
        return response
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract must be one of {EXTRACT_MODES}, got {mode!r}")
    blocks = [m.group(3) for m in _FENCE.finditer(response) if m.group(2).lower() not in _OTHER_LANGS]
    if not blocks:
        return None
    if mode == "first_block":
        return blocks[0]
    if mode == "longest_block":
        return max(blocks, key=len)
    return blocks[-1]
