"""A TRL-shaped reward function that raises on some rows (tests/trainer/test_reward_function_examples.py): the
run must mask those rows and train on the others."""


def fails_on_gold_two(prompts, completions, ground_truth, **kwargs):
    if ground_truth[0] == "2":
        raise ValueError("no rule for this row")
    return [0.5 for _ in completions]
