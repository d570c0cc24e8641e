"""Rewards/masks, the DAPO overlong penalty and dynamic-sampling filter, and pass@k / maj@k summaries."""

from __future__ import annotations

import math

import torch

from graders.types import Grade
from reasoning_rl.config import GradingConfig, OverlongConfig
from reasoning_rl.data import Example
from reasoning_rl.rollout import Completion
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.eval import summarise
from reasoning_rl.trainer.records import Sample
from reasoning_rl.trainer.rewards import informative_groups, rewards_and_mask, sample_metrics


def sample(group: int, grade: Grade, text: str = "x", tokens: int = 3, source: str = "s") -> Sample:
    ex = Example(
        uid=f"p{group}",
        data_source=source,
        messages=({"role": "user", "content": "q"},),
        ground_truth="1",
        grader="math",
    )
    comp = Completion(group, 0, [1], list(range(tokens)), [0.0] * tokens, text, "stop")
    return Sample(group, ex, comp, grade)


def test_errors_masked_not_zero_and_counted() -> None:
    s = [sample(0, Grade.correct()), sample(0, Grade.error("timeout")), sample(0, Grade.incorrect())]
    rewards, mask = rewards_and_mask(s, max_tokens=10, overlong=OverlongConfig())
    assert mask.tolist() == [True, False, True]
    m = sample_metrics(s, rewards, mask)
    assert m["reward/mean"] == 0.5 and m["reward/accuracy"] == 0.5  # the error is not a fake 0
    assert m["grading/error"] == 1 and m["grading/error_reason/timeout"] == 1


def test_overlong_penalty_is_linear_in_the_buffer() -> None:
    s = [sample(0, Grade.correct(), tokens=n) for n in (6, 8, 10)]
    rewards, _ = rewards_and_mask(
        s, max_tokens=10, overlong=OverlongConfig(enabled=True, buffer=4, penalty=1.0)
    )
    assert torch.allclose(rewards, torch.tensor([1.0, 0.5, 0.0]))


def test_dynamic_sampling_keeps_groups_with_signal() -> None:
    s = [
        sample(0, Grade.correct()),
        sample(0, Grade.correct()),
        sample(1, Grade.correct()),
        sample(1, Grade.incorrect()),
        sample(2, Grade.incorrect()),
        sample(2, Grade.error("x")),
    ]
    assert informative_groups(s) == {1}


def test_pass_and_majority_at_k() -> None:
    def g(ok: bool, ans: str) -> Grade:
        return Grade(1.0 if ok else 0.0, "correct" if ok else "incorrect", "", {"extracted": [ans]})

    s = [
        sample(0, g(True, "4")),
        sample(0, g(False, "5")),
        sample(0, g(False, "5")),  # pass, majority wrong
        sample(1, g(True, "2"), source="t"),
        sample(1, g(True, "2"), source="t"),
        sample(1, g(False, "3"), source="t"),
    ]
    r = summarise(s, 3)
    assert r.metrics["eval/pass@3"] == 1.0 and r.metrics["eval/maj@3"] == 0.5
    assert math.isclose(r.metrics["eval/mean_score"], (1 / 3 + 2 / 3) / 2)
    assert r.by_source["s"]["maj@3"] == 0.0 and r.by_source["t"]["maj@3"] == 1.0


def test_evaluate_asks_the_engine_for_text_only() -> None:
    """Eval grades text: it must not make the engine compute per-token log-probs (vocab-wide work per token)."""
    from graders.runtime import GradingPool
    from reasoning_rl.config import EvalConfig
    from reasoning_rl.rollout import SamplingConfig
    from reasoning_rl.rollout.stepped import as_continuous
    from reasoning_rl.trainer.eval import evaluate

    asked: list[SamplingConfig] = []

    class Engine:
        """Generates only: eval drives it through a frontier, step by step (``as_continuous``)."""

        version = 0

        def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
            asked.append(sampling)
            return [Completion(i, 0, p, [5], [], "\\boxed{1}", "stop") for i, p in enumerate(prompts)]

    class Tokenizer:
        def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
            return "\\boxed{1}"

    from reasoning_rl.data import Prompt

    prompts = [
        Prompt(
            Example(
                uid=f"p{i}",
                data_source="s",
                messages=({"role": "user", "content": "q"},),
                ground_truth="1",
                grader="math",
            ),
            [1, 2],
        )
        for i in range(3)
    ]
    with GradingPool(workers=1) as pool:
        result = evaluate(
            as_continuous(Engine()),  # type: ignore[arg-type]
            pool,
            prompts,
            EvalConfig(n=2, temperature=0.5),
            max_tokens=8,  # type: ignore[arg-type]
            stop=(),
            rewards=RewardPlan(GradingConfig()),
            seed=0,
            tokenizer=Tokenizer(),
        )
    assert [s.logprobs for s in asked] == [False] and result.metrics["eval/mean_score"] == 1.0
