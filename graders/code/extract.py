"""Take the program out of a model response: a fenced code block (last by default) or the raw text.

Fences are ``` or ~~~ (three or more, CommonMark-style); the closing fence may end the code's last line
(```print(1)```), a block left open at the end of the response runs to the end, and a block indented under a
list item is dedented. When the entry point is known, ``last_block``/``first_block`` prefer blocks that define
it, so a trailing "example usage" block is not graded instead of the solution."""

from __future__ import annotations

import re
import textwrap
from typing import Literal

ExtractMode = Literal["last_block", "first_block", "longest_block", "raw"]
EXTRACT_MODES: tuple[ExtractMode, ...] = ("last_block", "first_block", "longest_block", "raw")
_FENCE = re.compile(
    r"^([ \t]*)(`{3,}|~{3,})[ \t]*\{?\.?([\w+#.-]*)[^\n]*\n"  # opening fence, optional language
    r"(.*?)"  # the code
    r"(?:^[ \t]*\2[`~]*[ \t]*$|(?<=\S)\2[ \t]*$|\Z)",  # a fence line, a fence ending the last line, or the end
    re.M | re.S,
)
_OTHER_LANGS = {
    "text",
    "txt",
    "output",
    "console",
    "bash",
    "sh",
    "shell",
    "json",
    "plaintext",
    "cpp",
    "c++",
    "java",
    "c",
    "go",
    "rust",
    "javascript",
    "js",
}


def _defines(code: str, name: str) -> bool:
    n = re.escape(name)
    return (
        re.search(
            rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{n}\b|^[ \t]*class[ \t]+(?:Solution|{n})\b|^{n}[ \t]*=",
            code,
            re.M,
        )
        is not None
    )


def _block(indent: str, code: str) -> str:
    code = code if code.endswith("\n") or not code else code + "\n"
    return textwrap.dedent(code) if indent else code


def extract_code(
    response: str, mode: ExtractMode = "last_block", entry_point: str | None = None
) -> str | None:
    """The chosen code block, ignoring blocks tagged with another language; None when there is none."""
    if mode == "raw":
        return response
    if mode not in EXTRACT_MODES:
        raise ValueError(f"extract must be one of {EXTRACT_MODES}, got {mode!r}")
    blocks = [
        _block(m.group(1), m.group(4))
        for m in _FENCE.finditer(response)
        if m.group(3).lower() not in _OTHER_LANGS
    ]
    if not blocks:
        return None
    if mode == "longest_block":
        return max(blocks, key=len)
    if entry_point is not None:
        blocks = [b for b in blocks if _defines(b, entry_point)] or blocks
    return blocks[0] if mode == "first_block" else blocks[-1]
