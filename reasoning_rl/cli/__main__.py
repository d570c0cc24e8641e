"""``python -m reasoning_rl.cli``: the ``rrl`` command without its console script."""

from reasoning_rl.cli.app import app

app()
