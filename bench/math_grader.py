"""Math grader vs Math-Verify 0.9.0: per-pair latency and agreement with labels, side by side in one run.

Workload (read in place from ../shared/acceptance/math/; the bench exits with a message when it is absent):
- the 800 labelled Qwen2.5-Math responses (ours in ``lenient`` mode; Math-Verify ``parse`` with its default
  configs, the gold wrapped in ``$...$`` as its README advises),
- the 269 labelled pairs of Math-Verify's own test suite (each side in the extraction config the test used).
Each side runs in its own fresh process (cold caches: no memo from the other side or an earlier run); the
clock covers one whole judgement per pair (extraction + parsing + comparison) after imports. Our worker pool is
warmed first and that startup is reported apart, like Math-Verify's import time. Target: our median and p99
both at least 2x faster. Writes bench/out/math_grader.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ACCEPTANCE = Path(os.environ.get("RRL_SHARED", REPO.parent / "shared")) / "acceptance" / "math"
OUT = REPO / "bench" / "out" / "math_grader.json"
EXPR_ONLY = {"test_number_extraction"}
LATEX_ONLY = {
    "test_latex_notation",
    "test_latex_notation_math",
    "test_relations_math",
    "test_matrix_extraction",
    "test_set_rel_assymetry",
}


def load_pairs() -> list[dict[str, Any]]:
    """Every labelled pair: ``{"set", "pred", "gold", "label", "test", "params"}``."""
    pairs: list[dict[str, Any]] = []
    for line in (ACCEPTANCE / "qwen25math_cot_100.jsonl").read_text().splitlines():
        row = json.loads(line)
        for response, label in zip(row["code"], row["score"], strict=True):
            pairs.append({"set": "qwen800", "pred": response, "gold": row["gt"], "label": bool(label)})
    for line in (ACCEPTANCE / "math_verify_cases.jsonl").read_text().splitlines():
        row = json.loads(line)
        p = row["params"]
        if "gold" in p and "pred" in p:
            label = bool(p.get("expected", p.get("result")))
            pairs.append(
                {
                    "set": "suite269",
                    "pred": p["pred"],
                    "gold": p["gold"],
                    "label": label,
                    "test": row["test"],
                    "params": p,
                }
            )
    return pairs


def run_ours(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    from graders.math import MathGrader

    grader = MathGrader()
    grader.pool.warm(1)
    startup = time.perf_counter() - start
    times, verdicts = [], []
    for pair in pairs:
        # Math-Verify's suite labels accept rounded decimals: judged under our explicit option for that (as in
        # tests/graders/test_math_acceptance.py); the 800 responses under the default exact comparison.
        options: dict[str, Any] = {"rounded_decimals": 2} if pair["set"] != "qwen800" else {}
        t0 = time.perf_counter()
        result = grader.grade(pair["pred"], pair["gold"], mode="lenient", **options)
        times.append(time.perf_counter() - t0)
        verdicts.append(result.verdict)
    return {"startup_s": startup, "times": times, "verdicts": verdicts}


def run_math_verify(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    start = time.perf_counter()
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    startup = time.perf_counter() - start
    times, verdicts = [], []
    for pair in pairs:
        test = pair.get("test")
        if test in EXPR_ONLY:
            configs: list[Any] = [ExprExtractionConfig()]
        elif test in LATEX_ONLY:
            configs = [LatexExtractionConfig()]
        else:
            configs = [LatexExtractionConfig(), ExprExtractionConfig()]
        params = pair.get("params") or {}
        options = {"strict": params["strict"]} if "strict" in params else {}
        if "precision" in params:
            options["float_rounding"] = params["precision"]
        if "allow_set_relation_comp" in params:
            options["allow_set_relation_comp"] = params["allow_set_relation_comp"]
        gold_text = pair["gold"] if pair["set"] == "suite269" else f"${pair['gold']}$"
        t0 = time.perf_counter()
        try:
            ok = verify(parse(gold_text, configs), parse(pair["pred"], configs), **options)
            verdict = "correct" if ok else "incorrect"
        except Exception:  # the peer's own failure mode: counted as an error verdict, never hidden
            verdict = "error"
        times.append(time.perf_counter() - t0)
        verdicts.append(verdict)
    return {"startup_s": startup, "times": times, "verdicts": verdicts}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summarise(pairs: list[dict[str, Any]], side: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"startup_s": round(side["startup_s"], 3)}
    for name in ("qwen800", "suite269", "all"):
        idx = [i for i, p in enumerate(pairs) if name == "all" or p["set"] == name]
        ms = [side["times"][i] * 1000 for i in idx]
        agree = sum((side["verdicts"][i] == "correct") == pairs[i]["label"] for i in idx)
        out[name] = {
            "pairs": len(idx),
            "median_ms": round(statistics.median(ms), 4),
            "p99_ms": round(_pct(ms, 0.99), 3),
            "mean_ms": round(statistics.fmean(ms), 4),
            "max_ms": round(max(ms), 2),
            "agree": agree,
            "errors": sum(side["verdicts"][i] == "error" for i in idx),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=["ours", "math_verify"], help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if not ACCEPTANCE.exists():
        sys.exit(f"[bench] {ACCEPTANCE} not found: this benchmark needs ../shared/acceptance/math")
    pairs = load_pairs()
    if args.side:  # child: one side, fresh process
        result = run_ours(pairs) if args.side == "ours" else run_math_verify(pairs)
        args.result.write_text(json.dumps(result))
        return

    OUT.parent.mkdir(parents=True, exist_ok=True)
    sides: dict[str, Any] = {}
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    for side in ("math_verify", "ours"):
        tmp = OUT.parent / f".math_grader_{side}.json"
        subprocess.run([sys.executable, __file__, "--side", side, "--result", str(tmp)], check=True, env=env)
        sides[side] = summarise(pairs, json.loads(tmp.read_text()))
        tmp.unlink()

    ours, peer = sides["ours"], sides["math_verify"]
    ratios = {
        name: {
            "median_speedup": round(peer[name]["median_ms"] / ours[name]["median_ms"], 2),
            "p99_speedup": round(peer[name]["p99_ms"] / ours[name]["p99_ms"], 2),
        }
        for name in ("qwen800", "suite269", "all")
    }
    report = {
        "bench": "math_grader",
        "peer": "math-verify 0.9.0 (parse + verify)",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
        },
        "ours": ours,
        "math_verify": peer,
        "speedup": ratios,
        "target": "median and p99 speedup >= 2x",
    }
    OUT.write_text(json.dumps(report, indent=2))
    _print_table(ours, peer, ratios)
    print(f"[bench] wrote {OUT.relative_to(REPO)}")


def _print_table(ours: dict[str, Any], peer: dict[str, Any], ratios: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Math grader vs Math-Verify (ms per pair; agreement with labels)")
    for col in (
        "set",
        "side",
        "median ms",
        "p99 ms",
        "mean ms",
        "max ms",
        "agree",
        "errors",
        "speedup (med/p99)",
    ):
        table.add_column(col, justify="right" if col not in ("set", "side") else "left")
    for name in ("qwen800", "suite269", "all"):
        for label, side in (("math-verify", peer), ("ours", ours)):
            s = side[name]
            speed = (
                f"{ratios[name]['median_speedup']}x / {ratios[name]['p99_speedup']}x"
                if label == "ours"
                else ""
            )
            table.add_row(
                name,
                label,
                f"{s['median_ms']:.3f}",
                f"{s['p99_ms']:.2f}",
                f"{s['mean_ms']:.3f}",
                f"{s['max_ms']:.1f}",
                f"{s['agree']}/{s['pairs']}",
                str(s["errors"]),
                speed,
            )
    Console(width=150).print(table)
    print(f"startup (imports / warm pool): math-verify {peer['startup_s']}s, ours {ours['startup_s']}s")


if __name__ == "__main__":
    main()
