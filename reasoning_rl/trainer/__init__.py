"""The trainer: the RL loop, checkpoints, metrics, evaluation and export (``rrl train`` / ``rrl eval``)."""
