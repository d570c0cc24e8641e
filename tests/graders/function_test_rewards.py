"""Reward functions in TRL's and verl's shapes for tests/graders/test_function_rewards.py: importable by name, so
grading workers load them as a run's `grading.rewards[].function` would."""

from __future__ import annotations

import json
import math
import os
import time


def contains_truth(prompts, completions, ground_truth, **kwargs):
    return [1.0 if str(t) in c else 0.0 for c, t in zip(completions, ground_truth, strict=True)]


def sees_columns(prompts, completions, ground_truth, answer, data_source, extra_info, target, **kwargs):
    """1.0 only when every column arrives as TRL passes it: one-element lists."""
    ok = (
        prompts == ["Say 7"]
        and completions == ["it is 7"]
        and ground_truth == answer == ["7"]
        and data_source == ["digits"]
        and extra_info == [{"target": 7}]
        and target == [7]
    )
    return [1.0 if ok else 0.0]


def sees_conversation(prompts, completions, **kwargs):
    ok = prompts[0][-1] == {"role": "user", "content": "Say 7"} and completions == [
        [{"role": "assistant", "content": "it is 7"}]
    ]
    return [1.0 if ok else 0.0]


def raises(prompts, completions, **kwargs):
    raise ValueError("cannot parse\nthis completion")


def two_values(prompts, completions, **kwargs):
    return [1.0, 0.0]


def a_string(prompts, completions, **kwargs):
    return "1.0"


def a_word(prompts, completions, **kwargs):
    return ["yes"]


def not_applicable(prompts, completions, **kwargs):
    return [None]


def not_a_number(prompts, completions, **kwargs):
    return [math.nan]


def scaled(prompts, completions, **kwargs):
    """-1 (no answer), 0.5 (wrong), 2 (right): TRL functions are not bound to [0, 1]."""
    return [2.0 if "7" in completions[0] else (0.5 if completions[0] else -1.0)]


def sleeps(prompts, completions, **kwargs):
    time.sleep(60)
    return [1.0]


def kills_its_process(prompts, completions, **kwargs):
    os._exit(3)


def verl_score(data_source, solution_str, ground_truth, extra_info=None):
    return {
        "score": 1.0 if str(ground_truth) in solution_str else 0.0,
        "source": data_source,
        "extra": json.dumps(extra_info),
    }


def verl_plain(solution_str, ground_truth, method="strict"):
    """verl's own gsm8k.compute_score signature: no data_source or extra_info parameter."""
    return 1.0 if solution_str.strip().endswith(str(ground_truth)) else 0.0


def verl_acc(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 0.2, "acc": True}


def verl_no_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"reward": 1.0}


def neither(x, y):
    return 1.0
