"""Re-read the TRL runs of an ``interleave.py`` result from their logs with today's parser, and write it again.

    python bench/gpu/reparse_trl.py RESULT.json LOGS.tgz [--out OUT.json]

For results written before a parser fix: a realistic-workload TRL run cut by its timeout after its steps (no
RESULT line) was recorded with the anchor's nominal token count (2026-12-06, ``issue42c_match.json``); its log
(kept in the call's ``*_logs.tgz``) holds TRL's own per-step counts, which ``interleave.trl_record`` now reads.
Our runs are kept as recorded; the summary and ratios are recomputed (``throughput.result``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interleave  # noqa: E402
import throughput  # noqa: E402


def reparse(doc: dict[str, Any], logs: Path) -> dict[str, Any]:
    with tarfile.open(logs) as tar:
        texts = {
            Path(m.name).name: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }
    kind = "realistic" if doc["workload"].get("name") == "realistic" else "anchor"
    runs = []
    for rec in doc["runs"] + doc.get("failed", []):
        if rec.get("side") == "trl":
            got = interleave.parse_trl(texts[Path(rec["log"]).name])
            rec = {**rec, **interleave.trl_record(rec["name"], got, kind)}
        runs.append(rec)
    extra = {k: v for k, v in doc.items() if k in ("schedule", "skipped")}
    return throughput.result(
        doc["workload"],
        [r for r in runs if r.get("steps_s")],
        **extra,
        failed=[r for r in runs if not r.get("steps_s")],
        reparsed=f"TRL runs re-read from {logs.name} by bench/gpu/reparse_trl.py",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("logs", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    doc = reparse(json.loads(args.result.read_text()), args.logs)
    (args.out or args.result).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(throughput.table(doc))


if __name__ == "__main__":
    main()
