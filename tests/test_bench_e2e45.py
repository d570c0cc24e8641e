"""bench/gpu/e2e45.py and trl45.py (issue 45): ours' tiny variant end to end on CPU with vLLM CPU (float32),
each response exactly its log-normal target long; TRL's micro-batch default; the result a reader can recompute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "gpu"))

import throughput  # noqa: E402
from lengths import lognormal_lengths  # noqa: E402


def test_trl_micro_batch_is_the_largest_power_of_two_within_ours_budget() -> None:
    pytest.importorskip("torch")
    from trl45 import default_micro

    assert default_micro(49_920, 8_704, 512) == 4  # the 1.5B shape at 8k on an H200: the plan's 5 sequences
    assert default_micro(49_920, 16_896, 512) == 2
    assert default_micro(49_920, 8_704, 24) == 4 and default_micro(49_920, 8_704, 6) == 2  # divides the batch
    assert default_micro(None, 8_704, 512) == 1


@pytest.mark.slow
@pytest.mark.vllm
def test_ours_tiny_variant_runs_end_to_end_with_controlled_lengths(tmp_path: Path) -> None:
    pytest.importorskip("vllm")
    env = {**os.environ, "PYTHONPATH": str(REPO), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cmd = [
        sys.executable,
        "bench/gpu/e2e45.py",
        "--tiny",
        "--out",
        str(tmp_path),
        "--work",
        str(tmp_path / "w"),
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "e2e45_tiny.json").read_text())
    w, run = result["workload"], result["runs"][0]
    lengths = lognormal_lengths(w["prompts"] * w["samples_per_prompt"], w["max_tokens"])
    assert len(run["steps_s"]) == 2 and run["gen_tokens"] == [float(sum(lengths))] * 2  # exactly the targets
    prompt = w["prompts"] * w["samples_per_prompt"] * w["prompt_tokens"]
    assert run["tokens"] == [float(sum(lengths) + prompt)] * 2
    assert result["requests_length_controlled"] == 3 * len(lengths)  # warm-up + 2 measured steps
    assert result["sides"] == throughput.summarise(result["runs"])["sides"]
    assert result["phases"]["update"]["tokens_per_s"] > 0 and result["micro_batch_slots_max"] > 0
    assert "peak: device" in proc.stdout
