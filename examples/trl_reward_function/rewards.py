"""Two reward functions exactly as TRL's GRPOTrainer takes them (`reward_funcs=[accuracy_reward, format_reward]`):
`fn(prompts, completions, **kwargs) -> list[float]`, the dataset's columns arriving as keyword lists. Nothing
here knows about reasoning-rl; `config.yaml` names them under `grading.rewards[].function`."""

import re

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def accuracy_reward(completions, ground_truth, **kwargs):
    """1.0 when the last \\boxed{} answer equals the ground truth (after stripping spaces and a trailing .0)."""
    rewards = []
    for completion, truth in zip(completions, ground_truth, strict=True):
        answers = BOXED.findall(completion)
        answer = answers[-1].replace(" ", "").removesuffix(".0") if answers else None
        rewards.append(1.0 if answer == str(truth).strip() else 0.0)
    return rewards


def format_reward(completions, **kwargs):
    """1.0 when the completion closes with a \\boxed{} answer in its last 200 characters."""
    return [1.0 if BOXED.search(completion[-200:]) else 0.0 for completion in completions]
