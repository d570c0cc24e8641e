"""Shared fixtures. Paths to ../shared are read in place and skipped cleanly when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rrl_testutil import REPO, SHARED, shared_path
from system_programs import missing_program_line

__all__ = ["REPO", "SHARED", "shared_path"]

# vLLM's CPU backend otherwise zero-fills a KV cache of 20 % of the RAM minus its RSS at every engine start
# (~3 GiB on CI's 24 GiB runner: 3-7 s of page faults per `rrl train` process, dozens of them); 1 GiB (its env's
# unit) holds every test's sequences many times over. Set here, every process the tests start inherits it (it
# also overrides a smaller kv_cache_memory_bytes: vLLM's legacy setting wins).
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
# The Ray clusters the tests start themselves (fixtures a run joins) run their workers at nice 0, as the local
# instance `rrl train` starts does (reasoning_rl.cluster): at Ray's default 15 a loaded machine starved the ranks.
os.environ.setdefault("RAY_worker_niceness", "0")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Stop before running anything when a selected test needs a system program that is not installed."""
    line = missing_program_line(session.items)
    if line is not None:
        pytest.exit(line, returncode=4)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random 2-layer Qwen2 + char-level tokenizer, built offline once per session."""
    pytest.importorskip("torch")
    from reasoning_rl.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny_model"))
