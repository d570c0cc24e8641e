"""Sum a py-spy profile (``py-spy record --format raw``): where a process's time goes, by frame.

    py-spy record --rate 200 --subprocesses --format raw -o prof.txt -- python3 ...
    python bench/gpu/stacks_report.py prof.txt [--within "step (vllm/v1/engine/llm_engine.py"] [--process rrl]
        [--top 40] [--lines]

Why: generation on the GPU kit is bound by the host (issues 42 and 44: ~20 us per running request per decode
step on the anchor and on the learning workload alike), so the question is which Python holds it. py-spy reads
the stacks from outside the process (no GIL, no bias); an in-process sampler thread was tried first and
discarded: it attributed 62 % of a CPU decode step to a 512-element ``ndarray.max()`` that cProfile put at
~0 (a sampler thread only sees the main thread where it hands the GIL over). ``run42.sh`` runs a phase under
py-spy with ``PYSPY=1`` (the wheel travels in ``.gpu_carry/whl``).

Per process: samples in all, then over the samples whose stack holds ``--within`` (part of a frame, e.g. a
function name and file; default: all) the frames that hold the most of them (inclusive) and the innermost ones
(self). Frames are ``function (file)`` (``--lines``: with the line). Shares are of the ``--within`` samples.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter, defaultdict
from pathlib import Path

_LINE = re.compile(r":\d+\)$")


def load(path: Path, lines: bool) -> dict[str, Counter[str]]:
    """Per process (its header frame), folded stacks (innermost last) -> samples."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for raw in path.read_text().splitlines():
        stack, _, count = raw.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        process, _, rest = stack.partition(";")
        frames = rest.split(";") if lines else [_LINE.sub(")", f) for f in rest.split(";")]
        out[process][";".join(frames)] += int(count)
    return out


def summarize(stacks: Counter[str], within: str, top: int) -> list[str]:
    """Lines: the inclusive and self frames of the stacks that hold ``within``."""
    chosen = {s: n for s, n in stacks.items() if within in s}
    total = sum(chosen.values())
    if not total:
        return [f"  no sample holds {within!r}"]
    incl: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for s, n in chosen.items():
        frames = s.split(";")
        for f in set(frames):
            incl[f] += n
        own[frames[-1]] += n
    lines = [f"  {total} samples hold {within!r}", "  inclusive:"]
    lines += [f"    {n / total:6.1%}  {f}" for f, n in incl.most_common(top)]
    lines += ["  self (innermost):"]
    lines += [f"    {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", type=Path)
    ap.add_argument("--within", default="")
    ap.add_argument("--process", default="", help="only processes whose command line holds this")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--lines", action="store_true", help="frames with their line numbers")
    ap.add_argument("--min-samples", type=int, default=100, help="skip processes with fewer samples")
    args = ap.parse_args()
    for process, stacks in load(args.profile, args.lines).items():
        total = sum(stacks.values())
        if args.process not in process or total < args.min_samples:
            continue
        print(f"{process[:200]}: {total} samples")
        print("\n".join(summarize(stacks, args.within, args.top)))


if __name__ == "__main__":
    main()
