"""Config: defaults, overrides, and errors that name the bad key and the allowed values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reasoning_rl.config import ConfigError, load_config, parse_overrides, save_config

MINIMAL = {"model": {"path": "m"}, "data": {"train": {"generator": "arithmetic"}}}


def write(tmp_path: Path, data: dict) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_defaults_and_single_source_shorthand(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL))
    assert cfg.algorithm.name == "grpo" and cfg.rollout.n == 8
    assert cfg.data.train[0].generator == "arithmetic"
    assert cfg.run_dir == Path("runs/run")


def test_dotted_overrides_typed_and_list_items(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, MINIMAL),
        [
            "rollout.n=4",
            "optim.lr=3e-4",
            "trainer.resume=auto",
            "rollout.stop=[a, b]",
            "data.train.0.size=12",
            "run.name=x",
        ],
    )
    assert cfg.rollout.n == 4 and cfg.optim.lr == 3e-4 and cfg.trainer.resume == "auto"
    assert cfg.rollout.stop == ["a", "b"] and cfg.data.train[0].size == 12
    assert cfg.run_dir == Path("runs/x")


def test_unknown_key_names_key_and_allowed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), ["rollout.temprature=0.5"])
    msg = str(e.value)
    assert "rollout.temprature: unknown key" in msg and "temperature" in msg


def test_bad_literal_lists_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), ["algorithm.advantage=grpo2"])
    msg = str(e.value)
    assert "algorithm.advantage" in msg and "'drgrpo'" in msg and "grpo2" in msg


def test_missing_required_and_bad_types(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model: required key is missing"):
        load_config(write(tmp_path, {"data": MINIMAL["data"]}))
    with pytest.raises(ConfigError, match=r"rollout.n"):
        load_config(write(tmp_path, MINIMAL), ["rollout.n=many"])
    with pytest.raises(ConfigError, match=r"exactly one of 'path' or 'generator'"):
        load_config(write(tmp_path, {**MINIMAL, "data": {"train": {"size": 3}}}))


def test_batch_and_algorithm_consistency(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mini_batch_size=5 must divide"):
        load_config(
            write(tmp_path, MINIMAL), ["trainer.batch_size=2", "rollout.n=4", "algorithm.mini_batch_size=5"]
        )
    assert load_config(write(tmp_path, MINIMAL), ["algorithm.name=ppo"]).algorithm.advantage == "gae"
    with pytest.raises(ConfigError, match="gae"):
        load_config(write(tmp_path, MINIMAL), ["algorithm.advantage=gae"])


def test_continuous_rollouts_refuse_paths_that_cannot_keep_requests(tmp_path: Path) -> None:
    from reasoning_rl.trainer.plan import step_plan

    cfg = load_config(write(tmp_path, MINIMAL), ["rollout.max_lag=2", "rollout.engine=vllm"])
    plan = step_plan(cfg, pad_id=0)
    assert plan.decoupled and plan.old_source == "recompute"  # the proximal policy is the trainer's recompute
    assert (
        load_config(write(tmp_path, MINIMAL), ["rollout.max_lag=2", "rollout.engine=hf"]).rollout.max_lag == 2
    )
    dynamic = ["rollout.max_lag=1", "algorithm.dynamic_sampling=true"]  # reject-and-admit on the frontier
    assert load_config(write(tmp_path, MINIMAL), dynamic).algorithm.dynamic_sampling
    colocated = ["rollout.max_lag=1", "resources.ranks_per_node=2"]  # RemoteEngine over the colocated ranks
    assert load_config(write(tmp_path, MINIMAL), colocated).rollout.max_lag == 1
    tools = [
        "rollout.max_lag=1",
        "rollout.tools=[calculator]",
        "rollout.tool_format=hermes",
    ]  # tool loop, frontier
    assert load_config(write(tmp_path, MINIMAL), tools).rollout.tools == ["calculator"]
    with pytest.raises(
        ConfigError, match=r"rollout.max_lag=1 cannot be used with algorithm.old_logprobs=rollout"
    ):
        load_config(write(tmp_path, MINIMAL), ["rollout.max_lag=1", "algorithm.old_logprobs=rollout"])
    assert not step_plan(load_config(write(tmp_path, MINIMAL)), pad_id=0).decoupled


def test_running_groups_is_bounded_by_the_staleness_cap(tmp_path: Path) -> None:
    """``rollout.running_groups`` (groups generating; None: the batch) is separate from ``rollout.max_lag``, and
    more than the ``trainer.batch_size x (1 + max_lag)`` groups that may be untrained could never run: refused
    in one line naming the fields."""
    assert load_config(write(tmp_path, MINIMAL)).rollout.running_groups is None
    ok = ["trainer.batch_size=4", "rollout.max_lag=1", "rollout.running_groups=8"]
    assert load_config(write(tmp_path, MINIMAL), ok).rollout.running_groups == 8
    assert (
        load_config(write(tmp_path, MINIMAL), [*ok[:2], "rollout.running_groups=1"]).rollout.running_groups
        == 1
    )
    for bad, capacity in (
        ([*ok[:2], "rollout.running_groups=9"], 8),
        (["trainer.batch_size=4", "rollout.running_groups=5"], 4),
    ):
        with pytest.raises(ConfigError) as e:
            load_config(write(tmp_path, MINIMAL), bad)
        assert f"is more than trainer.batch_size x (1 + rollout.max_lag) = {capacity}" in str(
            e.value
        ) and "rollout.running_groups=" in str(e.value)
    with pytest.raises(ConfigError, match="running_groups"):
        load_config(write(tmp_path, MINIMAL), ["rollout.running_groups=0"])


def test_continuous_rollouts_on_split_placement_and_the_overlap_switch(tmp_path: Path) -> None:
    """Split placement's rollout ranks run continuous rollouts (overlapped by default, paused on request);
    ``rollout.overlap=false`` means nothing elsewhere and is refused there, naming the key; LoRA's adapter
    swap under resident requests is still refused on split."""
    split = ["resources.placement=split", "resources.rollout_ranks=1", "resources.ranks_per_node=2"]
    lagged = ["rollout.max_lag=1", "rollout.engine=vllm"]
    cfg = load_config(write(tmp_path, MINIMAL), [*lagged, *split])
    assert cfg.rollout.overlap and cfg.resources.placement == "split"
    assert not load_config(
        write(tmp_path, MINIMAL), [*lagged, *split, "rollout.overlap=false"]
    ).rollout.overlap
    for bad in (
        ["rollout.overlap=false"],
        [*lagged, "rollout.overlap=false"],
        [*split, "rollout.overlap=false"],
    ):
        with pytest.raises(
            ConfigError, match=r"rollout.overlap=false pauses split placement's .*; remove it"
        ):
            load_config(write(tmp_path, MINIMAL), bad)
    with pytest.raises(ConfigError, match=r"rollout.max_lag=1 cannot be used with model.lora on split"):
        load_config(write(tmp_path, MINIMAL), [*lagged, *split, "model.lora.rank=4"])
    lora = load_config(write(tmp_path, MINIMAL), [*lagged, "model.lora.rank=4"])  # colocated: merged weights
    assert lora.model.lora.enabled


def test_engine_args_pass_through_but_not_over_owned_keys(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, MINIMAL), ["rollout.engine_args={max_num_seqs: 4, async_scheduling: true}"]
    )
    assert cfg.rollout.engine_args == {"max_num_seqs": 4, "async_scheduling": True}
    with pytest.raises(ConfigError, match=r"rollout.engine_args.*\['seed'\] are set from other keys"):
        load_config(write(tmp_path, MINIMAL), ["rollout.engine_args={seed: 1}"])


def test_device_dependent_defaults_and_explicit_values(tmp_path: Path) -> None:
    from reasoning_rl.trainer.build import device_defaults

    cfg = load_config(write(tmp_path, MINIMAL))
    assert device_defaults(cfg, "cpu") == (False, True) and device_defaults(cfg, "cuda") == (True, False)
    pinned = load_config(write(tmp_path, MINIMAL), ["model.compile=false", "rollout.seed_per_sample=true"])
    assert device_defaults(pinned, "cuda") == (False, True)


def test_bad_override_syntax_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="key.path=value"):
        parse_overrides(["rollout.n"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_resolved_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, MINIMAL), ["rollout.n=3"])
    save_config(cfg, tmp_path / "run" / "config.yaml")
    again = load_config(tmp_path / "run" / "config.yaml")
    assert again == cfg


def test_counts_reject_booleans(tmp_path: Path) -> None:
    """Before: `trainer.steps=true` passed as 1 step (pydantic's lax int accepts a bool)."""
    path = write(tmp_path, MINIMAL)
    for override in ("trainer.steps=true", "rollout.n=false", "optim.lr=true", "data.train.0.limit=true"):
        with pytest.raises(ConfigError) as err:
            load_config(path, [override])
        assert override.split("=")[0] in str(err.value) and "boolean" in str(err.value)
    assert load_config(path, ["trainer.steps=3", "run.doctor=true"]).trainer.steps == 3


def test_group_baseline_estimators_need_two_samples(tmp_path: Path) -> None:
    """Before: GRPO with rollout.n=1 trained on all-zero advantages without a word."""
    path = write(tmp_path, MINIMAL)
    for advantage in ("grpo", "drgrpo", "rloo", "reinforce_pp_baseline"):
        with pytest.raises(ConfigError, match=r"rollout\.n=1: algorithm\.advantage='" + advantage):
            load_config(path, ["rollout.n=1", f"algorithm.advantage={advantage}"])
    assert load_config(path, ["rollout.n=1", "algorithm.advantage=reinforce_pp"]).rollout.n == 1


def test_indexing_an_empty_list_names_the_list(tmp_path: Path) -> None:
    """Before: `data.val.0.limit=2` with no val sources gave pydantic's 'Input should be a valid list'."""
    path = write(tmp_path, MINIMAL)
    with pytest.raises(ConfigError, match=r"data\.val has no items to index .*data\.val=\[\{path: FILE\}\]"):
        load_config(path, ["data.val.0.limit=2"])
    with pytest.raises(
        ConfigError, match=r"override index data\.train\.3 is out of range \(list has 1 items\)"
    ):
        load_config(path, ["data.train.3.limit=2"])
