"""``resources.share_gpus`` (issue 44): split placement's rollout ranks as extra processes on the training ranks'
GPUs, so one GPU decodes in one process while it trains in the other. Where each rank's actor goes, what is
refused, and the memory plan that keeps the engine's share beside the trainer for the whole step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reasoning_rl.config import Config, ConfigError
from reasoning_rl.distributed.launch import Slot, check_request, check_tensor_parallel, rank_slots
from tests.distributed.test_group import _config as group_config


def _config(**sections: dict[str, Any]) -> Config:
    """test_group's small config with one rollout rank sharing the training GPU (``sections`` override)."""
    shared = {"placement": "split", "rollout_ranks": 1, "share_gpus": True, **sections.pop("resources", {})}
    return group_config(resources=shared, **sections)


def test_a_rollout_rank_shares_its_training_rank_bundle_and_gpu() -> None:
    """Rollout rank i goes into training rank i's one-GPU bundle, both actors at half a GPU: Ray gives them the
    bundle's device. Fractional bundles of their own could put two training ranks on one GPU."""
    bundles, slots = rank_slots(2, 2, gpu=True, tp=1, share=True)
    assert bundles == [{"GPU": 1.0}, {"GPU": 1.0}]
    assert slots == [Slot(0, 0.0, 0.5), Slot(1, 0.0, 0.5), Slot(0, 0.0, 0.5), Slot(1, 0.0, 0.5)]
    assert sum(s.gpus for s in slots) == sum(b["GPU"] for b in bundles)  # nothing over-subscribed
    one, alone = rank_slots(1, 1, gpu=True, tp=1, share=True)
    assert one == [{"GPU": 1.0}] and [s.bundle for s in alone] == [0, 0]


def test_without_sharing_every_rank_has_its_own_bundle() -> None:
    bundles, slots = rank_slots(2, 1, gpu=True, tp=2, share=False)
    assert bundles == [{"GPU": 1.0}, {"GPU": 1.0}, {"GPU": 2.0}]
    assert slots == [Slot(0, 0.0, 1.0), Slot(1, 0.0, 1.0), Slot(2, 0.0, 2.0)]
    cpu_bundles, cpu_slots = rank_slots(1, 1, gpu=False, tp=1, share=False)
    assert cpu_bundles == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert cpu_slots == [Slot(0, 1.0, 0.0), Slot(1, 1.0, 0.0)]


def test_on_cpu_a_shared_rollout_rank_is_an_extra_process_in_the_training_bundle() -> None:
    bundles, slots = rank_slots(1, 1, gpu=False, tp=1, share=True)
    assert bundles == [{"CPU": 1.0}]
    assert slots == [Slot(0, 1.0, 0.0), Slot(0, 0.0, 0.0)]


def test_sharing_counts_every_rank_of_the_layout_as_a_training_rank() -> None:
    shared = _config().resources
    own = _config(resources={"share_gpus": False}).resources
    assert shared.training_ranks(1) == 1 and own.training_ranks(2) == 1
    check_request(_config(), 1)  # one GPU: one training rank and the rollout rank beside it
    with pytest.raises(ConfigError, match="leaves no training rank of 1"):
        check_request(_config(resources={"share_gpus": False}), 1)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"resources": {"rollout_ranks": 2}}, "rollout_ranks=2 but 1 training rank"),
        (
            {"resources": {"placement": "colocated", "rollout_ranks": 0}},
            "share_gpus needs resources.placement=split",
        ),
    ],
)
def test_what_cannot_share_is_refused_in_one_line(sections: dict[str, Any], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        check_request(_config(**sections), 1)


def test_tensor_parallel_engines_cannot_share_a_training_gpu() -> None:
    cfg = _config(rollout={"engine": "vllm", "tensor_parallel_size": 2})
    with pytest.raises(ConfigError, match="tensor_parallel_size=2 with resources.share_gpus"):
        check_tensor_parallel(cfg, "cuda", 2)


def test_the_plan_keeps_the_engine_share_beside_the_update(tmp_path: Path) -> None:
    """A shared GPU's engine decodes through the update: the update is planned with the engine's share (and its
    process's context) held, which a rollout rank on a GPU of its own does not take from the trainer."""
    pytest.importorskip("transformers")
    from reasoning_rl.memory_plan.plan import DEVICE_RESERVE, plan_run
    from tests.rl.test_memory_plan import H200, QWEN15, tiny_config
    from tests.rl.test_memory_plan_step import RUN

    def plan(share: bool) -> Any:
        cfg, shape = tiny_config(
            tmp_path,
            QWEN15,
            rollout={"max_tokens": 4096, "gpu_memory_utilization": 0.3},
            trainer={"batch_size": 8},
            resources={"placement": "split", "rollout_ranks": 1, "share_gpus": share},
        )
        return plan_run(cfg, shape, **{**RUN, "max_model_len": 4608})

    shared, own = plan(True), plan(False)
    assert shared.fits and own.fits and shared.engine is not None
    held = shared.engine.held(H200)
    assert shared.update["engine"] == held + DEVICE_RESERVE and "engine" not in own.update
    assert shared.micro_batch_tokens < own.micro_batch_tokens  # the largest budget beside the engine
    assert shared.phases["generation"] == held + shared.resident  # both processes on the one device
    assert own.phases["generation"] == held
    assert "on its rollout rank" in own.lines()[0] and "on its rollout rank" not in shared.lines()[0]
