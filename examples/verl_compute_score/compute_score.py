"""A scoring function exactly as verl's `custom_reward_function` takes it:
`compute_score(data_source, solution_str, ground_truth, extra_info=None) -> float | dict`. Nothing here knows
about reasoning-rl; `config.yaml` names it under `grading.rewards[].function`."""

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's GSM8K rule, flexible flavour: the last number in the response against the ground truth.
    A dict, as verl allows: `score` is the reward, the other keys are logged (`acc` is the verdict here)."""
    numbers = _NUMBER.findall(solution_str)
    pred = numbers[-1].replace(",", "").removesuffix(".0") if numbers else None
    acc = pred is not None and pred == str(ground_truth).replace(",", "").strip()
    return {"score": 1.0 if acc else 0.0, "acc": acc, "pred": pred}
