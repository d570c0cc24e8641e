"""The memory plan's formulas against known shapes: parameter counts of the real Qwen2.5 models (and of the
model transformers builds from the same config), the activations autograd really saves per token of a decoder
layer (counted tensor by tensor on CPU), the budget it picks, and the one-line fix of a config that cannot fit."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from reasoning_rl.config import Config, ConfigError, LoraConfig  # noqa: E402
from reasoning_rl.memory_plan.engine import plan_engine  # noqa: E402
from reasoning_rl.memory_plan.plan import plan_run, usable_bytes  # noqa: E402
from reasoning_rl.memory_plan.shapes import Adapters, GiB, ModelShape, PlanUnavailable  # noqa: E402
from reasoning_rl.memory_plan.update import (  # noqa: E402
    BUDGET_STEP,
    TrainSetup,
    kept_bytes,
    largest_budget,
    update_peak,
    update_terms,
)
from reasoning_rl.model_shapes import QWEN25_1_5B, QWEN25_7B  # noqa: E402

H200 = 139 * GiB  # what torch reports for the lent H200s (about 139 GiB)
QWEN15 = dict(QWEN25_1_5B, max_position_embeddings=131072)
QWEN7 = dict(QWEN25_7B, max_position_embeddings=131072)


def qwen2(**kw: Any) -> Any:
    return transformers.Qwen2Config(**kw)


def meta_params(config: Any) -> int:
    """Parameters of the model transformers builds from ``config`` (no memory: the meta device)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("kw", "known"),
    [(QWEN15, 1_543_714_304), (QWEN7, 7_615_616_512)],
    ids=["qwen2.5-1.5b", "qwen2.5-7b"],
)
def test_parameter_counts_are_the_real_models(kw: dict[str, Any], known: int) -> None:
    config = qwen2(**kw)
    shape = ModelShape.from_config(config.to_dict())
    assert shape.params == known == meta_params(config)  # 1.54B and 7.62B, as published
    assert round(shape.params / 1e9, 2) == (1.54 if known < 2e9 else 7.62)


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_parameter_counts_of_other_dense_families(family: str) -> None:
    kw = dict(
        vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4
    )
    config = (
        transformers.LlamaConfig(num_key_value_heads=2, attention_bias=True, mlp_bias=True, **kw)
        if family == "llama"
        else transformers.Qwen3Config(num_key_value_heads=2, head_dim=24, **kw)
    )
    assert ModelShape.from_config(config.to_dict()).params == meta_params(config)


def test_kv_cache_bytes_per_token() -> None:
    shape = ModelShape.from_config(qwen2(**QWEN15).to_dict())
    assert shape.kv_bytes_per_token(2) == 2 * 28 * 2 * 128 * 2 == 28_672  # 28 KiB a token in bf16


def saved_bytes(model: Any, tokens: int) -> int:
    """Bytes of the tensors autograd saves in a forward of ``model.model`` (each storage once, weights out)."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: Any) -> Any:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            seen[ptr] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=ids, use_cache=False)
    return sum(seen.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("family", ["qwen2", "llama", "qwen3"])
def test_saved_activations_per_layer_are_what_autograd_keeps(family: str, dtype: Any) -> None:
    """Eager HF decoder layers: one more layer adds exactly ``layer_saved_bytes`` per token."""
    kw = dict(
        vocab_size=128, hidden_size=128, intermediate_size=320, num_attention_heads=4, num_key_value_heads=2
    )
    cls = {
        "qwen2": transformers.Qwen2Config,
        "llama": transformers.LlamaConfig,
        "qwen3": transformers.Qwen3Config,
    }
    extra = {} if family == "qwen2" else {"head_dim": 48}
    counts = []
    for layers in (1, 2):
        config = cls[family](num_hidden_layers=layers, **kw, **extra)
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config).to(dtype)
        counts.append(saved_bytes(model, 48))
    shape = ModelShape.from_config(config.to_dict())
    b = 2 if dtype == torch.bfloat16 else 4
    assert (counts[1] - counts[0]) / 48 == shape.layer_saved_bytes(b, compiled=False)


def test_compiled_layer_formula_matches_the_cpu_measurement() -> None:
    """The compiled figure (AOTAutograd's partitioner, measured once on CPU with inductor: 73,784 bytes per
    token for the Qwen2-1.5B layer, of which 512 are the rotary cos/sin every layer shares) stays pinned."""
    shape = ModelShape.from_config(qwen2(**QWEN15).to_dict())
    assert shape.layer_saved_bytes(2, compiled=True) == 73_784 - 512
    assert shape.layer_saved_bytes(2, compiled=False) == 103_480


def tiny_config(tmp_path: Path, shape_kw: dict[str, Any], **sections: Any) -> tuple[Config, ModelShape]:
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    conf = qwen2(**shape_kw).to_dict()
    (model_dir / "config.json").write_text(json.dumps(conf))
    raw: dict[str, Any] = {"model": {"path": str(model_dir)}, "data": {"train": "x.jsonl"}}
    for key, value in sections.items():
        raw.setdefault(key.split("_")[0], {}).update(value)
    return Config.model_validate(raw), ModelShape.from_model_dir(model_dir)


def test_budget_is_the_largest_that_fits(tmp_path: Path) -> None:
    cfg, shape = tiny_config(tmp_path, QWEN15)
    s = TrainSetup.of(cfg, device="cuda", dtype="bfloat16", world=1)
    usable = usable_bytes(H200)
    best = largest_budget(shape, s, usable)
    assert best % BUDGET_STEP == 0
    assert update_peak(shape, s, best) <= usable < update_peak(shape, s, best + BUDGET_STEP)


def test_qwen_1_5b_at_8k_plans_the_optimizer_state_from_step_one(tmp_path: Path) -> None:
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": 8192, "n": 8}, trainer={"batch_size": 16}
    )
    plan = plan_run(
        cfg, shape, device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=8704, engine=True
    )
    assert plan.fits, plan.problem
    assert plan.update["optimizer"] == 8 * shape.params  # fp32 AdamW moments, counted before step 1 made them
    assert plan.micro_batch_tokens >= 8704 and plan.update_peak <= plan.usable
    e = plan.engine
    assert e is not None and e.max_num_seqs == e.wanted_seqs == 128  # 16 prompts x 8 samples on one engine
    assert e.kv == 128 * 8704 * 28_672  # KV for exactly what a step asks, not a fixed share
    assert 0.1 < e.utilization(H200) < 0.5
    lines = plan.lines()
    assert lines[0].startswith("step peak ") and "optimizer" in lines[1]
    assert "gpu_memory_utilization=" in lines[2]


def test_a_config_that_cannot_fit_gets_one_line_with_the_switch(tmp_path: Path) -> None:
    """7B on an 80 GiB GPU: fp32 masters, gradients and AdamW alone are 113 GiB, so the fix is the offload;
    on a 24 GiB one it takes checkpointing too."""
    cfg, shape = tiny_config(tmp_path, QWEN7, rollout={"max_tokens": 4096})
    plan = plan_run(
        cfg,
        shape,
        device="cuda",
        dtype="bfloat16",
        capacity=80 * GiB,
        world=1,
        max_model_len=4608,
        engine=False,
    )
    assert plan.problem is not None and "\n" not in plan.problem
    assert plan.problem.startswith("memory plan: one 4608-token sequence needs")
    assert ": set model.cpu_offload=true (then micro_batch_tokens up to" in plan.problem
    fixed, _ = tiny_config(tmp_path, QWEN7, rollout={"max_tokens": 4096}, model={"cpu_offload": True})
    assert plan_run(
        fixed,
        shape,
        device="cuda",
        dtype="bfloat16",
        capacity=80 * GiB,
        world=1,
        max_model_len=4608,
        engine=False,
    ).fits
    small = plan_run(
        cfg,
        shape,
        device="cuda",
        dtype="bfloat16",
        capacity=24 * GiB,
        world=1,
        max_model_len=4608,
        engine=False,
    )
    assert small.problem is not None
    assert ": set model.gradient_checkpointing=true model.cpu_offload=true (then" in small.problem


def test_a_budget_too_large_is_named_with_the_largest_that_fits(tmp_path: Path) -> None:
    cfg, shape = tiny_config(tmp_path, QWEN15, algorithm={"micro_batch_tokens": 262_144})
    plan = plan_run(
        cfg, shape, device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=4096, engine=False
    )
    s = TrainSetup.of(cfg, device="cuda", dtype="bfloat16", world=1)
    best = largest_budget(shape, s, usable_bytes(H200))
    assert plan.problem is not None
    assert f"set algorithm.micro_batch_tokens<={best}" in plan.problem


def test_switches_lower_the_planned_peak(tmp_path: Path) -> None:
    cfg, shape = tiny_config(tmp_path, QWEN15)
    base = TrainSetup.of(cfg, device="cuda", dtype="bfloat16", world=1)
    peaks = {
        name: update_peak(shape, TrainSetup(**{**base.__dict__, **change}), 16384)
        for name, change in {
            "none": {},
            "every_2": {"checkpointing": True, "checkpoint_every": 2},
            "all": {"checkpointing": True},
            "act_offload": {"activation_offload": True},
            "cpu_offload": {"cpu_offload": True},
        }.items()
    }
    assert peaks["none"] > peaks["every_2"] > peaks["all"]
    assert peaks["none"] > peaks["act_offload"]
    # 7B: with foreach AdamW the optimizer step (fp32 state + its full-size temporary, 20 bytes a parameter) is
    # the peak whatever the activations; the fused AdamW (the CUDA default) has none, so checkpointing fits
    big = ModelShape.from_config(qwen2(**QWEN7).to_dict())
    foreach = TrainSetup(**{**base.__dict__, "fused_optimizer": False, "checkpointing": True})
    assert base.fused_optimizer and update_peak(big, foreach, 4608) == 20 * big.params
    fused = TrainSetup(**{**base.__dict__, "checkpointing": True})
    assert update_peak(big, fused, 4608) < usable_bytes(H200) < update_peak(big, foreach, 4608)
    assert peaks["none"] - peaks["cpu_offload"] == 16 * shape.params  # masters, grads, moments to the host
    sharded = update_terms(shape, TrainSetup(**{**base.__dict__, "world": 4}), 16384)
    assert sharded["optimizer"] == 8 * -(-shape.params // 4)


def test_a_response_limit_the_engine_cannot_hold_is_one_line(tmp_path: Path) -> None:
    cfg, shape = tiny_config(tmp_path, QWEN15, rollout={"max_tokens": 120_000})
    with pytest.raises(ConfigError) as err:
        plan_engine(shape, cfg, dtype="bfloat16", available=8 * GiB, max_model_len=120_512, wanted_seqs=8)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("rollout.max_tokens=120000: one 120512-token sequence needs")
    fit = int(msg.split("lower rollout.max_tokens to <= ")[1])
    plan = plan_engine(
        shape, cfg, dtype="bfloat16", available=8 * GiB, max_model_len=fit + 512, wanted_seqs=8
    )
    assert plan.max_num_seqs == 1  # the limit it names does fit: one sequence at a time


def test_models_it_cannot_plan_say_why(tmp_path: Path) -> None:
    with pytest.raises(PlanUnavailable, match="no config.json"):
        ModelShape.from_model_dir(tmp_path)
    with pytest.raises(PlanUnavailable, match="model_type 'mixtral'"):
        ModelShape.from_config({"model_type": "mixtral"})


def test_doctor_prints_the_plan_of_a_config(tmp_path: Path) -> None:
    """`rrl doctor CONFIG` lists the plan's lines (a CPU run here: the host's memory, no engine sizing)."""
    from reasoning_rl.doctor import run_checks

    cfg, _ = tiny_config(tmp_path, QWEN15, run={"device": "cpu"})
    rows = [
        r for r in run_checks(cfg.model_dump(mode="json"), essential_only=True) if r.name == "memory plan"
    ]
    assert rows and rows[0].status == "ok" and rows[0].detail.startswith("step peak ")
    assert rows[1].detail.startswith("update peak ")
    assert "micro_batch_tokens=8192" in rows[1].detail  # CPU keeps the former fixed budget


def test_an_engine_awake_in_the_update_holds_its_whole_share(tmp_path: Path) -> None:
    """rollout.sleep=false: the update gets what the engine leaves; a share the config fixes is what vLLM takes
    (its KV cache fills it), not what the step needs."""
    kw = dict(rollout={"max_tokens": 8192, "sleep": False}, trainer={"batch_size": 8})
    cfg, shape = tiny_config(tmp_path, QWEN15, **kw)
    run = dict(device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=8704, engine=True)
    sized = plan_run(cfg, shape, **run)
    assert sized.engine is not None and sized.update["engine"] == int(sized.engine.utilization(H200) * H200)
    fixed, _ = tiny_config(
        tmp_path, QWEN15, **{**kw, "rollout": {**kw["rollout"], "gpu_memory_utilization": 0.3}}
    )
    held = plan_run(fixed, shape, **run)
    assert held.engine is not None and held.engine.utilization(H200) == 0.3
    assert held.update["engine"] == int(0.3 * H200) > sized.update["engine"]
    assert held.micro_batch_tokens < sized.micro_batch_tokens


def test_offloaded_states_must_fit_the_host(tmp_path: Path) -> None:
    """7B with model.cpu_offload: 16 bytes a parameter (122 GB) of pinned host memory; a 128 GiB host cannot
    hold that and the run beside it, a 512 GiB one can."""
    cfg, shape = tiny_config(tmp_path, QWEN7, rollout={"max_tokens": 4096}, model={"cpu_offload": True})
    run = dict(device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=4608, engine=False)
    small = plan_run(cfg, shape, host_capacity=128 * GiB, **run)
    assert small.host == 16 * shape.params
    assert small.problem is not None and "need 113.5 GiB of pinned host memory" in small.problem
    assert plan_run(cfg, shape, host_capacity=512 * GiB, **run).fits


def test_the_group_drafters_host_memory_is_in_the_plan(tmp_path: Path) -> None:
    """Issue 41: the group drafter keeps up to ``group_max_bytes`` of samples in host memory per engine: a line of
    the plan, and counted against the host with the offloaded states."""
    spec = {"method": "group", "group_max_bytes": 40 * GiB}
    rollout = {"max_tokens": 4096, "temperature": 0.0, "speculative": spec}
    cfg, shape = tiny_config(tmp_path, QWEN7, rollout=rollout, model={"cpu_offload": True})
    run = dict(device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=4608, engine=True)
    plan = plan_run(cfg, shape, host_capacity=160 * GiB, **run)
    assert plan.drafts == 40 * GiB
    assert "host memory for the group drafter's samples 40.0 GiB at most" in plan.lines()
    assert plan.problem is not None and "and the group drafter up to 40.0 GiB" in plan.problem
    fits = cfg.model_copy(deep=True)
    fits.rollout.speculative.group_max_bytes = 1 << 30
    assert plan_run(fits, shape, host_capacity=160 * GiB, **run).problem is None
    off = cfg.model_copy(deep=True)
    off.rollout.speculative.method = "off"
    assert plan_run(off, shape, host_capacity=160 * GiB, **run).drafts == 0


def test_the_step_two_oom_of_issue_36_is_predicted(tmp_path: Path) -> None:
    """The H200 run of issue 36 (Qwen2.5-1.5B shape, 8,192-token responses, vLLM awake at 0.3 of the device):
    4 sequences per micro-batch died in step 2 (AdamW's state arriving), 2 ran with a 98 GiB peak. The plan
    refuses 4 with the budget that fits, and puts 2 within 15 % of that peak."""
    seq = 512 + 8192
    rollout = {"max_tokens": 8192, "sleep": False, "gpu_memory_utilization": 0.3}
    run = dict(device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=seq, engine=True)
    four, shape = tiny_config(tmp_path, QWEN15, rollout=rollout, algorithm={"micro_batch_tokens": 4 * seq})
    refused = plan_run(four, shape, **run)
    assert refused.problem is not None
    fits = int(refused.problem.split("micro_batch_tokens<=")[1].split()[0])
    assert 2 * seq <= fits < 4 * seq
    two, _ = tiny_config(tmp_path, QWEN15, rollout=rollout, algorithm={"micro_batch_tokens": 2 * seq})
    plan = plan_run(two, shape, **run)
    assert plan.fits and plan.update_peak / GiB == pytest.approx(98, rel=0.15)


def test_the_run_sizes_vllm_and_the_budget_from_the_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """factory.engine_for on CUDA hands vLLM the plan's share and max_num_seqs (a set engine_args.max_num_seqs
    wins), build_models' budget is the plan's, and a response limit no device can hold is one line."""
    from reasoning_rl import factory

    made: list[dict[str, Any]] = []
    monkeypatch.setattr(factory, "device_capacity", lambda device: H200)
    monkeypatch.setattr(factory, "rollout_kind", lambda cfg: "vllm")
    monkeypatch.setattr(factory, "make_engine", lambda kind, path, **kw: made.append(kw) or kw)
    cfg, shape = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": 8192, "n": 8}, trainer={"batch_size": 8}
    )
    model_dir = Path(cfg.model.path)
    factory.engine_for(cfg, model_dir, "cuda", 8704, dtype="bfloat16")
    plan = plan_run(
        cfg, shape, device="cuda", dtype="bfloat16", capacity=H200, world=1, max_model_len=8704, engine=True
    )
    assert plan.engine is not None
    assert made[-1]["gpu_memory_utilization"] == plan.engine.utilization(H200) < 0.2
    assert made[-1]["max_num_seqs"] == 64 and made[-1]["max_model_len"] == 8704
    assert factory.micro_batch_budget(cfg, model_dir, "cuda", "bfloat16", 8704) == plan.micro_batch_tokens
    own, _ = tiny_config(tmp_path, QWEN15, rollout={"max_tokens": 8192, "engine_args": {"max_num_seqs": 16}})
    factory.engine_for(own, model_dir, "cuda", 8704, dtype="bfloat16")
    assert made[-1]["max_num_seqs"] == 16
    long, _ = tiny_config(tmp_path, QWEN15, rollout={"max_tokens": 4_000_000})
    with pytest.raises(ConfigError, match=r"^rollout\.max_tokens=4000000: one 4000512-token sequence needs"):
        factory.engine_for(long, model_dir, "cuda", 4_000_512, dtype="bfloat16")


def peft_wrapped(config: Any, lora: LoraConfig, dtype: Any = None) -> Any:
    """The HF model of ``config`` with PEFT adapters injected as a LoRA run injects them (add_adapters)."""
    from reasoning_rl.policy.lora import add_adapters

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if dtype is not None:
        model = model.to(dtype)
    add_adapters(model, lora, upcast=True, seed=0)
    return model


@pytest.mark.parametrize(
    ("targets", "tied"),
    [
        ("all-linear", True),
        (["q_proj", "v_proj"], True),
        (r"model\.layers\.1\..*_proj", True),
        (["lm_head", "down_proj"], False),
    ],
    ids=["all-linear", "q-v", "regex-one-layer", "untied-head"],
)
def test_adapter_parameter_counts_are_peft_s(targets: Any, tied: bool) -> None:
    """Rank, target modules and shape give exactly the parameters PEFT trains in the wrapped model."""
    config = qwen2(
        vocab_size=200,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    lora = LoraConfig(rank=4, target_modules=targets)
    model = peft_wrapped(config, lora)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    adapters = Adapters.of(ModelShape.from_config(config.to_dict()), lora)
    assert adapters.params == trained > 0
    assert (
        sum(p.numel() for p in model.parameters())
        == ModelShape.from_config(config.to_dict()).params + trained
    )


def test_adapters_of_qwen_1_5b_r32_all_linear_are_the_measured_count() -> None:
    """bench/gpu/results/issue32_lora_memory.json: 36,929,536 trainable parameters for r=32 on every linear."""
    shape = ModelShape.from_config(qwen2(**QWEN15).to_dict())
    assert Adapters.of(shape, LoraConfig(rank=32)).params == 36_929_536


@pytest.mark.parametrize(
    ("dtype", "dropout"),
    [(torch.float32, 0.0), (torch.bfloat16, 0.0), (torch.float32, 0.1)],
    ids=["fp32", "bf16-base-fp32-adapters", "fp32-dropout"],
)
def test_saved_activations_of_an_adapted_layer_are_what_autograd_keeps(dtype: Any, dropout: float) -> None:
    """One more PEFT-adapted decoder layer (all linear layers) saves at most the planned
    ``layer_saved_bytes + Adapters.saved_bytes`` per token and not 25 % less: an upper bound, since the frozen
    base saves less than a trained layer (no inputs kept for weight gradients) while the adapters save their
    low-rank input and a new input tensor where a dropout or a cast to fp32 makes one."""
    kw = dict(
        vocab_size=128, hidden_size=128, intermediate_size=320, num_attention_heads=4, num_key_value_heads=2
    )
    lora = LoraConfig(rank=8, dropout=dropout)
    counts = []
    for layers in (1, 2):
        model = peft_wrapped(qwen2(num_hidden_layers=layers, **kw), lora, dtype).train()
        counts.append(saved_bytes(model, 48))
    config = qwen2(num_hidden_layers=2, **kw)
    shape = ModelShape.from_config(config.to_dict())
    b = 2 if dtype == torch.bfloat16 else 4
    per_layer = shape.layer_saved_bytes(b, compiled=False) + Adapters.of(shape, lora).saved_bytes(b, 4)
    measured = (counts[1] - counts[0]) / 48
    assert measured <= per_layer <= 1.25 * measured, (measured, per_layer)


def test_lora_keeps_only_the_adapters_states_and_no_reference(tmp_path: Path) -> None:
    """With model.lora the base stays frozen in bf16, only the fp32 adapters have gradients and AdamW moments,
    and a KL term builds no second model; the planned peak falls accordingly."""
    kw: dict[str, Any] = {"algorithm": {"kl_coef": 0.05}, "model": {"gradient_checkpointing": True}}
    full_cfg, shape = tiny_config(tmp_path, QWEN15, **kw)
    lora_cfg, _ = tiny_config(tmp_path, QWEN15, **{**kw, "model": {**kw["model"], "lora": {"rank": 32}}})
    full = TrainSetup.of(full_cfg, device="cuda", dtype="bfloat16", world=1)
    lora = TrainSetup.of(lora_cfg, device="cuda", dtype="bfloat16", world=1)
    a = 36_929_536
    assert kept_bytes(shape, lora) == {"params": 2 * shape.params + 4 * a, "grads": 4 * a, "optimizer": 8 * a}
    assert kept_bytes(shape, full)["reference"] == 2 * shape.params
    assert update_peak(shape, lora, 8192) < 0.5 * update_peak(shape, full, 8192)
    sharded = replace(lora, world=4)
    assert kept_bytes(shape, sharded)["optimizer"] == 8 * math.ceil(a / 4)


def test_a_cpu_plan_over_its_usable_memory_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Issue 47: on CPU the plan printed an update peak above its own usable memory and the dry run said ok.
    Now the plan has a problem naming the budget that fits (or gradient checkpointing)."""
    cfg, shape = tiny_config(tmp_path, QWEN15, rollout={"max_tokens": 1024})
    kw = {"device": "cpu", "dtype": "float32", "world": 1, "max_model_len": 1536, "engine": False}
    roomy = plan_run(cfg, shape, capacity=512 * GiB, **kw)
    assert roomy.fits, roomy.problem
    tight = plan_run(cfg, shape, capacity=40 * GiB, **kw)
    assert tight.update_peak > tight.usable  # the 8192-token CPU default does not fit
    assert tight.problem is not None and "\n" not in tight.problem
    assert tight.problem.startswith("memory plan: the update at micro_batch_tokens=8192 needs")
    fix = tight.problem.rsplit(": set ", 1)[1]
    assert fix.startswith("algorithm.micro_batch_tokens=")
    budget = int(fix.split("=")[1])
    fixed, _ = tiny_config(
        tmp_path, QWEN15, rollout={"max_tokens": 1024}, algorithm={"micro_batch_tokens": budget}
    )
    assert plan_run(fixed, shape, capacity=40 * GiB, **kw).fits
