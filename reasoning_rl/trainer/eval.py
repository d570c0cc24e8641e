"""Evaluation: generate k samples per validation prompt, grade with the same graders, and summarise
accuracy (mean over samples), pass@k (any correct) and maj@k (the most common answer is correct) per
data source. Used during training (every ``eval.every`` steps) and by ``rrl eval``."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from graders.runtime import GradingPool
from reasoning_rl.config import Config, EvalConfig
from reasoning_rl.data import Example
from reasoning_rl.rollout import RolloutEngine, SamplingConfig
from reasoning_rl.trainer.collect import Sample, collect
from reasoning_rl.trainer.governance import identity_fields


@dataclass
class EvalResult:
    metrics: dict[str, float]
    rows: list[dict[str, Any]]
    by_source: dict[str, dict[str, float]]


def _answer_key(sample: Sample) -> str:
    """What maj@k votes on: the grader's extracted answer when it reports one, else the stripped text."""
    details = sample.grade.details
    for key in ("extracted", "answer", "prediction"):
        value = details.get(key)
        if value is not None:
            return str(value)
    return sample.completion.text.strip()


def summarise(samples: Sequence[Sample], k: int) -> EvalResult:
    """Per-prompt rows and per-source / overall metrics; ``error`` samples are counted, not scored as 0."""
    groups: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    rows: list[dict[str, Any]] = []
    per_source: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for _, group in sorted(groups.items()):
        ex = group[0].example
        judged = [s for s in group if not s.masked]
        votes = Counter(_answer_key(s) for s in judged)
        majority = votes.most_common(1)[0][0] if votes else None
        maj_correct = any(s.grade.verdict == "correct" for s in judged if _answer_key(s) == majority)
        row: dict[str, Any] = {
            "id": ex.uid, "data_source": ex.data_source, **identity_fields(ex.grader),
            "accuracy": sum(s.grade.score for s in judged) / len(judged) if judged else None,
            f"pass@{k}": float(any(s.grade.verdict == "correct" for s in judged)) if judged else None,
            f"maj@{k}": float(maj_correct) if judged else None,
            "errors": len(group) - len(judged),
            "responses": [{"text": s.completion.text, **s.grade.to_dict()} for s in group],
        }
        rows.append(row)
        stats = per_source[ex.data_source]
        for key in ("accuracy", f"pass@{k}", f"maj@{k}"):
            if row[key] is not None:
                stats[key].append(row[key])
        stats["errors"].append(row["errors"])
    by_source: dict[str, dict[str, float]] = {
        src: {key: (sum(v) / len(v) if key != "errors" else float(sum(v))) for key, v in lists.items() if v}
        for src, lists in per_source.items()
    }
    metrics: dict[str, float] = {}
    for src, summary in by_source.items():
        for key, value in summary.items():
            metrics[f"eval/{src}/{key}"] = value
    for key in ("accuracy", f"pass@{k}", f"maj@{k}"):
        values = [r[key] for r in rows if r[key] is not None]
        if values:
            metrics[f"eval/{key}"] = sum(values) / len(values)
    metrics["eval/errors"] = float(sum(r["errors"] for r in rows))
    metrics["eval/prompts"] = float(len(rows))
    return EvalResult(metrics, rows, by_source)


def evaluate(engine: RolloutEngine, pool: GradingPool, examples: Sequence[Example],
             prompt_ids: Sequence[list[int]], cfg: EvalConfig, *, max_tokens: int, stop: Sequence[str],
             grader_options: dict[str, dict[str, Any]], seed: int) -> EvalResult:
    limit = cfg.max_prompts or len(examples)
    sampling = SamplingConfig(n=cfg.n, temperature=cfg.temperature, max_tokens=cfg.max_tokens or max_tokens,
                              stop=tuple(stop), seed=seed, logprobs=False)  # grading needs only the text
    samples, _ = collect(engine, pool, examples[:limit], prompt_ids[:limit], sampling,
                         grader_options=grader_options)
    return summarise(samples, cfg.n)


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, default=str) + "\n")


def run_eval(cfg: Config, *, out: Path | None, console: Console) -> tuple[EvalResult, Path]:
    """``rrl eval``: evaluate ``cfg.model`` on ``data.val`` (or ``data.train``), no training."""
    from reasoning_rl.policy.model import load_tokenizer
    from reasoning_rl.trainer.setup import build_engine, load_data, resolve_device, resolve_model_dir

    device = resolve_device(cfg.run.device)
    model_dir = resolve_model_dir(cfg)
    tokenizer = load_tokenizer(str(model_dir), require_chat_template=cfg.data.chat_template)
    train, train_ids, val, val_ids = load_data(cfg, tokenizer, console)
    examples, prompt_ids = (val, val_ids) if val else (train, train_ids)
    r = cfg.rollout
    engine = build_engine(cfg, model_dir, device, prompt_ids, cfg.eval.max_tokens or r.max_tokens,
                          dtype=cfg.model.dtype, sleep=False)
    g = cfg.grading
    with GradingPool(workers=g.workers, backend=g.backend, ray_address=g.ray_address, timeout_s=g.timeout_s,
                     retries=g.retries, max_in_flight=g.max_in_flight) as pool:
        result = evaluate(engine, pool, examples, prompt_ids, cfg.eval, max_tokens=r.max_tokens, stop=r.stop,
                          grader_options=g.options, seed=cfg.run.seed)
    path = out or cfg.run_dir / "eval" / "results.jsonl"
    write_rows(path, result.rows)
    return result, path
