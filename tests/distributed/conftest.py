"""Shared runs for the distributed tests: each (algorithm, ranks) run is trained once per session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.distributed.runs import train, write_config


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Callable[[str, int], Path]:
    """``runs(algo, ranks)``: the run dir of a finished seeded run on one node (ranks > 1: local Ray)."""
    pytest.importorskip("ray")
    tmp = tmp_path_factory.mktemp("dist_runs")
    done: dict[tuple[str, int], Path] = {}

    def get(algo: str, ranks: int) -> Path:
        if (algo, ranks) not in done:
            name = f"{algo}-{ranks}r"
            train(write_config(tmp, tiny_model_dir, name, algo, ranks_per_node=ranks))
            done[(algo, ranks)] = tmp / name
        return done[(algo, ranks)]

    return get
