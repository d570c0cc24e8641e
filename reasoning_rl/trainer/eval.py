"""Evaluation: generate k samples per validation prompt, grade with the same graders, and summarise
mean_score (the mean of the samples' scores: partial credit counts), pass@k and maj@k (the most common
answer, by the grader's equivalence, is correct) per data source, with ``rrl grade``'s implementation
(graders.evaluation.scoring and summary). Used during training (every ``eval.every`` steps) and by
``rrl eval``. The samples come from a frontier of their own (``trainer/frontier``: one synchronous step over
every evaluated prompt, tool trajectories included), the machinery a training step uses."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from graders.evaluation.display import RATE_PREFIXES
from graders.evaluation.scoring import answer_keys, equivalence_checks, score_row
from graders.evaluation.summary import Group
from graders.runtime import GradeRequest, GradingPool
from graders.types import Grade
from reasoning_rl.config import Config, EvalConfig
from reasoning_rl.data import Example, Prompt, PromptSampler
from reasoning_rl.rollout import ContinuousEngine, SamplingConfig
from reasoning_rl.rollout.stepped import as_continuous
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import RewardPlan, example_context
from reasoning_rl.trainer.frontier import Frontier
from reasoning_rl.trainer.governance import identity_fields
from reasoning_rl.trainer.producers import ToolTurns
from reasoning_rl.trainer.records import Sample
from reasoning_rl.trainer.rewards import verdict_grader
from reasoning_rl.trainer.tool_collect import turn_fields


@dataclass
class EvalResult:
    metrics: dict[str, float]
    rows: list[dict[str, Any]]
    by_source: dict[str, dict[str, float]]


Checks = dict[int, tuple[list[tuple[int, str]], list[Grade]]]  # group -> equivalence checks and their grades


def prompt_messages(example: Example) -> list[dict[str, str]]:
    """The prompt as the model got it before templating (chat messages), for samples/ and eval rows: with
    generator data it cannot be recovered from the data file."""
    return [dict(m) for m in example.messages]


def _row_grader(group: Sequence[Sample]) -> str:
    """The grader an eval row names: the row's routed grader, or with a composed reward the first component,
    whose verdicts give pass@k and maj@k (each response names the component that judged it)."""
    composed = group[0].composed
    return composed.components[0][0].grader if composed is not None else group[0].example.grader


def summarise(samples: Sequence[Sample], k: int, checks: Checks | None = None) -> EvalResult:
    """Per-prompt rows and per-source / overall metrics, scored and aggregated by the same code as ``rrl grade``
    (graders.evaluation.scoring / summary), so both report the same numbers for the same responses.
    ``checks`` are the maj@k equivalence judgements (``equivalence_checks``); without them answers vote by string."""
    groups: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    rows: list[dict[str, Any]] = []
    overall = Group()
    per_source: dict[str, Group] = defaultdict(Group)
    for gid, group in sorted(groups.items()):
        ex = group[0].example
        grades = [s.grade for s in group]
        done, done_grades = (checks or {}).get(gid, ([], []))
        score = score_row(grades, [s.completion.text for s in group], done, done_grades)
        line = {"grades": [g.to_dict() for g in grades], "maj": score.maj}
        overall.add(line)
        per_source[ex.data_source].add(line)
        rows.append(
            {
                "id": ex.uid,
                "data_source": ex.data_source,
                **identity_fields(_row_grader(group)),
                "prompt": prompt_messages(ex),
                "ground_truth": ex.ground_truth,
                "mean_score": sum(g.score for g in grades) / len(grades),
                f"pass@{k}": float(score.passed),
                f"maj@{k}": float(bool(score.maj)),
                "majority_answer": score.majority_answer,
                "errors": score.n_error,
                "responses": [
                    {
                        "text": s.completion.text,
                        **turn_fields(s.completion),
                        **s.grade.to_dict(),
                        **(identity_fields(verdict_grader(s)) if s.composed else {}),
                        **(s.composed.row() if s.composed else {}),
                    }
                    for s in group
                ],
            }
        )
    by_source = {src: _numbers(g) for src, g in sorted(per_source.items())}
    metrics: dict[str, float] = {}
    for src, summary in by_source.items():
        for key, value in summary.items():
            metrics[f"eval/{src}/{key}"] = value
    for key, value in _numbers(overall).items():
        metrics[f"eval/{key}"] = value
    metrics["eval/prompts"] = float(len(rows))
    return EvalResult(metrics, rows, by_source)


def _numbers(group: Group) -> dict[str, float]:
    """mean_score, pass@k, maj@k (as ``rrl grade`` reports them) and the error count of one group."""
    m = group.metrics()
    out = {key: float(v) for key, v in m.items() if key.startswith(RATE_PREFIXES) and v is not None}
    out["errors"] = float(m["verdicts"].get("error", 0))
    return out


def equivalence(pool: GradingPool, samples: Sequence[Sample], rewards: RewardPlan) -> Checks:
    """Grade the maj@k equivalence checks of every prompt (different extracted answers, judged by the grader
    whose verdict the samples carry: the first reward component)."""
    groups: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    planned: dict[int, list[tuple[int, str]]] = {}
    requests: list[GradeRequest] = []
    for gid, group in sorted(groups.items()):
        keys = answer_keys([s.grade for s in group], [s.completion.text for s in group])
        planned[gid] = equivalence_checks(keys)
        ex = group[0].example
        term, context = rewards.primary(ex), example_context(ex)
        requests += [
            GradeRequest(term.grader, group[i].completion.text, answer, term.options, context=context)
            for i, answer in planned[gid]
        ]
    grades = iter(pool.grade_batch(requests)) if requests else iter(())
    return {gid: (checks, [next(grades) for _ in checks]) for gid, checks in planned.items()}


def evaluate(
    engine: ContinuousEngine,
    pool: GradingPool,
    prompts: Sequence[Prompt],
    cfg: EvalConfig,
    *,
    max_tokens: int,
    stop: Sequence[str],
    rewards: RewardPlan,
    seed: int,
    tokenizer: Any,
    tools: ToolSet | None = None,
) -> EvalResult:
    """``cfg.n`` samples of each of the first ``cfg.max_prompts`` prompts, as one synchronous frontier step
    over ``engine`` (an engine that only generates: ``as_continuous``); with ``tools`` every sample is a
    multi-turn tool rollout (the same loop as training)."""
    limit = cfg.max_prompts or len(prompts)
    sampling = SamplingConfig(
        n=cfg.n,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens or max_tokens,
        stop=list(stop),
        seed=seed,
        logprobs=False,
    )  # grading needs only the text
    evaluated = list(prompts[:limit])
    frontier = Frontier(
        engine,
        pool,
        evaluated,
        rewards,
        PromptSampler(len(evaluated), seed, shuffle=False),  # group k is prompt k
        batch=len(evaluated),
        max_lag=0,
        sampling=lambda _: sampling,
        seed_for_step=lambda _: seed,
        tokenizer=tokenizer,
        resident=True,
        tools=ToolTurns(tools, sampling) if tools is not None else None,
        prefix="rrl-e",  # beside a training frontier's parked requests
    )
    trace = TraceWriter(os.devnull)  # the eval span is the run trace's; its generate stage is not a step's
    try:
        rollouts, _ = frontier.next_batch(engine.version + 1, trace)
    finally:
        frontier.close()
        trace.close()
    return summarise(rollouts.samples, cfg.n, equivalence(pool, rollouts.samples, rewards))


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, default=str) + "\n")


def run_eval(cfg: Config, *, out: Path | None, console: Console) -> tuple[EvalResult, Path]:
    """``rrl eval``: evaluate ``cfg.model`` on ``data.val`` (or ``data.train``), no training."""
    from reasoning_rl.factory import resolve_device, resolve_model_dir
    from reasoning_rl.policy.model import load_tokenizer
    from reasoning_rl.trainer.build import build_engine, load_data

    device = resolve_device(cfg.run.device)
    model_dir = resolve_model_dir(cfg)
    tokenizer = load_tokenizer(str(model_dir), require_chat_template=cfg.data.chat_template is True)
    train, val = load_data(cfg, tokenizer, console)
    prompts = val or train
    rewards = RewardPlan(cfg.grading)
    rewards.check(p.example for p in prompts)
    r = cfg.rollout
    engine = build_engine(
        cfg,
        model_dir,
        device,
        prompts,
        cfg.eval.max_tokens or r.max_tokens,
        dtype=cfg.model.dtype,
        sleep=False,
    )
    g = cfg.grading
    tools = ToolSet.from_config(r, tokenizer)
    try:
        with GradingPool(
            workers=g.workers,
            backend=g.backend,
            ray_address=g.ray_address,
            timeout_s=g.timeout_s,
            retries=g.retries,
            max_in_flight=g.max_in_flight,
        ) as pool:
            result = evaluate(
                as_continuous(engine),
                pool,
                prompts,
                cfg.eval,
                max_tokens=r.max_tokens,
                stop=r.stop,
                rewards=rewards,
                seed=cfg.run.seed,
                tokenizer=tokenizer,
                tools=tools,
            )
    finally:
        if tools is not None:
            tools.close()
    path = out or cfg.run_dir / "eval" / "results.jsonl"
    write_rows(path, result.rows)
    return result, path
