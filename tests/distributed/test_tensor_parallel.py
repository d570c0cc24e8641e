"""``rollout.tensor_parallel_size``: what a run can give its engines is checked before anything starts (a
one-line error naming the key); TP itself needs several GPUs (the multi-GPU issue runs it)."""

from __future__ import annotations

from typing import Any

import pytest

from reasoning_rl.config import Config, ConfigError
from reasoning_rl.distributed.launch import check_tensor_parallel


def _config(tp: int, engine: str = "vllm", **resources: Any) -> Config:
    return Config.model_validate(
        {
            "model": {"path": "m"},
            "data": {"train": {"generator": "fixed_digit", "size": 4}},
            "rollout": {"engine": engine, "tensor_parallel_size": tp},
            "resources": resources,
        }
    )


SPLIT = {"placement": "split", "rollout_ranks": 1}


@pytest.mark.parametrize(
    ("cfg", "device", "per_node", "message"),
    [
        (_config(2, **SPLIT), "cpu", 4, r"rollout.tensor_parallel_size=2 needs CUDA .*on cpu set it to 1"),
        (_config(2, "hf", **SPLIT), "cuda", 4, r"tensor_parallel_size=2 needs rollout.engine=vllm"),
        (_config(4, **SPLIT), "cuda", 6, r"tensor_parallel_size=4 must divide resources.ranks_per_node=6"),
        (_config(2), "cuda", 4, r"tensor_parallel_size=2 needs resources.placement=split"),
    ],
)
def test_impossible_tensor_parallel_is_refused(cfg: Config, device: str, per_node: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        check_tensor_parallel(cfg, device, per_node)
    assert "\n" not in str(err.value)


def test_possible_tensor_parallel_passes() -> None:
    check_tensor_parallel(_config(2, **SPLIT), "cuda", 4)
    check_tensor_parallel(_config(1, "hf"), "cpu", 1)  # the default asks nothing


def test_tensor_parallel_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        _config(0)


def test_engine_gets_tensor_parallel_size(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """On CUDA the vLLM engine is made with ``tensor_parallel_size`` (the bundle of a rollout rank holds that
    many GPUs)."""
    from reasoning_rl import factory as build

    seen: dict[str, Any] = {}
    monkeypatch.setattr(build, "make_engine", lambda kind, path, **kw: seen.update(kind=kind, **kw))
    build.engine_for(_config(2, **SPLIT), tmp_path, "cuda", 64, dtype="bfloat16")
    assert seen["kind"] == "vllm" and seen["tensor_parallel_size"] == 2
    seen.clear()
    build.engine_for(_config(1), tmp_path, "cuda", 64, dtype="bfloat16")
    assert seen["kind"] == "vllm" and "tensor_parallel_size" not in seen  # the default leaves vLLM's own
