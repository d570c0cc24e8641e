"""reasoning-rl: train and evaluate reasoning LLMs with verifiable rewards."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("reasoning-rl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"
