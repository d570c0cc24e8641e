"""bench/gpu/memory_plan_check.py --tiny: the GPU check's own code path (random model written, planned, built
through build_models, two update steps) runs on CPU and writes its JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench" / "gpu"))

import memory_plan_check  # noqa: E402


def test_tiny_check_runs_on_cpu_and_writes_the_json(tmp_path: Path) -> None:
    result = memory_plan_check.check("tiny", tmp_path / "out", tmp_path / "work")
    saved = json.loads((tmp_path / "out" / "memory_plan_tiny.json").read_text())
    assert saved == json.loads(json.dumps(result))
    assert saved["micro_batches_per_step"] == 2 and saved["sequences_per_micro_batch"] == 4
    assert saved["predicted_peak_gib"] >= 0 and saved["measured_peak_gib"] is None  # no allocator on CPU
    assert saved["params"] == 107_072 and saved["tokens_per_s"] > 0
