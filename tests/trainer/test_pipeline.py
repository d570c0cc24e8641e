"""The step's typed pipeline: the old-log-prob decision, config defaults vs the behaviour they control,
Rollouts -> TrainBatch, the registries as extension points, and the engine as the owner of its sleep state."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
import torch

from graders.types import Grade
from reasoning_rl.algorithms import compute_advantages, policy_loss
from reasoning_rl.config import AlgorithmConfig, Config, ConfigError, LossConfig, RolloutConfig, load_config
from reasoning_rl.data import Example
from reasoning_rl.factory import Models
from reasoning_rl.registry import ENGINES, ESTIMATORS
from reasoning_rl.rollout import Completion, SamplingConfig
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.build import Components
from reasoning_rl.trainer.plan import old_logprob_source, step_plan
from reasoning_rl.trainer.records import Rollouts, Sample
from reasoning_rl.trainer.train_batch import make_train_batch
from reasoning_rl.trainer.update import update

BASE: dict[str, Any] = {
    "model": {"path": "m"},
    "data": {"train": {"generator": "fixed_digit", "size": 4}},
    "trainer": {"batch_size": 2},
    "rollout": {"n": 4},
}


def cfg_with(**algorithm: Any) -> Config:
    return Config.model_validate({**BASE, "algorithm": algorithm})


# ---- one decision of the old log-probs -------------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "source"),
    [
        ({}, "policy"),  # one update, the loss is the only user
        ({"kl_coef": 0.1}, "policy"),  # KL as a loss term needs only ref log-probs
        ({"kl_coef": 0.1, "kl_mode": "reward"}, "engine"),  # KL in the reward needs the numbers
        ({"name": "ppo"}, "engine"),  # GAE's token rewards too
        ({"epochs": 2}, "recompute"),  # several updates: a fixed denominator
        ({"mini_batch_size": 4}, "recompute"),
        ({"mini_batch_size": 8}, "policy"),  # one mini-batch of the whole batch
        ({"old_logprobs": "rollout", "epochs": 2}, "engine"),
        ({"old_logprobs": "recompute"}, "recompute"),
        (
            {"rollout_correction": {"enabled": True}},
            "recompute",
        ),  # TIS/MIS weigh the trainer's against the engine's
        ({"rollout_correction": {"enabled": True}, "kl_coef": 0.1, "kl_mode": "reward"}, "recompute"),
    ],
)
def test_old_logprob_source_is_decided_once_and_drives_the_engine_request(
    algorithm: dict[str, Any], source: str
) -> None:
    cfg = cfg_with(**algorithm)
    assert old_logprob_source(cfg) == source
    parts = _components(cfg, engine=None)
    assert parts.plan.old_source == source
    assert parts.sampling(seed=1).logprobs is (source != "policy")  # the engine skips them only for "policy"


def test_rollout_correction_refuses_the_engines_logprobs_as_old() -> None:
    """With old = the engine's, every TIS weight would be exp(0) = 1: a correction that corrects nothing."""
    with pytest.raises(ValueError, match="needs old_logprobs 'auto' or 'recompute', not 'rollout'"):
        cfg_with(old_logprobs="rollout", rollout_correction={"enabled": True})


# ---- config defaults == the behaviour they control ---------------------------------------------------
def test_loss_defaults_are_the_algorithm_defaults_and_what_the_loss_does() -> None:
    """LossConfig is the loss-key part of ``algorithm`` (one definition); with the config's defaults the
    loss clips the ratio at exactly 1 +/- the configured clip range and averages over tokens."""
    default = Config.model_validate(BASE).algorithm
    assert {k: getattr(default, k) for k in LossConfig.model_fields} == LossConfig().model_dump()
    one = torch.tensor([[0.0]])
    up, _ = policy_loss(torch.tensor([[math.log(1.5)]]), one, torch.tensor([1.0]), torch.ones(1, 1), default)
    assert float(up) == pytest.approx(-(1.0 + default.clip_high))
    down, _ = policy_loss(
        torch.tensor([[math.log(0.5)]]), one, torch.tensor([-1.0]), torch.ones(1, 1), default
    )
    assert float(down) == pytest.approx(1.0 - default.clip_low)
    lp = torch.zeros(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    loss, _ = policy_loss(lp, lp, torch.tensor([1.0, -3.0]), mask, default)
    assert default.loss_agg == "token-mean" and float(loss) == pytest.approx(-(3 * 1.0 - 3.0) / 4)
    with_kl = default.model_copy(update={"kl_coef": 0.5})  # default kl_mode: a loss term
    loss_kl, m = policy_loss(lp, lp, torch.tensor([1.0, -3.0]), mask, with_kl, ref_logprobs=lp - 1.0)
    assert float(loss_kl) == pytest.approx(float(loss) + 0.5 * float(m["kl"])) and float(m["kl"]) > 0


def test_engine_request_defaults_are_the_rollout_defaults() -> None:
    """SamplingConfig is the rollout section's sampling keys plus seed/log-probs (one definition)."""
    rollout = RolloutConfig()
    request = SamplingConfig.of(rollout, seed=7, logprobs=False)
    for key in ("n", "temperature", "top_p", "max_tokens", "stop", "ignore_eos"):
        assert getattr(request, key) == getattr(rollout, key), key
    plain = SamplingConfig()
    for key in ("temperature", "top_p", "max_tokens", "stop", "ignore_eos"):  # n: the group size differs
        assert getattr(plain, key) == getattr(rollout, key), key


def test_default_estimator_is_grpo() -> None:
    a = AlgorithmConfig()
    r, g = torch.tensor([1.0, 0.0, 0.0]), torch.zeros(3, dtype=torch.long)
    torch.testing.assert_close(compute_advantages(a.advantage, r, g), (r - 1 / 3) / (math.sqrt(1 / 3) + 1e-6))


# ---- Rollouts -> TrainBatch ----------------------------------------------------------------------------
def sample(group: int, uid: str, j: int, score: float, tokens: list[int], verdict: str = "") -> Sample:
    ex = Example(
        uid=uid,
        data_source="s",
        messages=({"role": "user", "content": "q"},),
        ground_truth="1",
        grader="math",
    )
    comp = Completion(group, j, [1, 2], tokens, [-0.5] * len(tokens), "t", "stop")
    grade = (
        Grade.error("boom") if verdict == "error" else (Grade.correct("") if score else Grade.incorrect(""))
    )
    return Sample(group, ex, comp, grade)


class Scorer:
    """Stands in for a model: fixed per-token log-probs / values, and counts the passes."""

    def __init__(self, value: float) -> None:
        self.value, self.calls = value, 0

    def _per_token(self, tokens: Any) -> torch.Tensor:
        self.calls += 1
        return torch.full(tokens.shape, self.value) * tokens.response_mask

    def logprobs(self, tokens: Any) -> Any:
        return self._per_token(tokens)


class PolicyScorer(Scorer):
    def logprobs(self, tokens: Any) -> Any:
        return self._per_token(tokens), None


@pytest.fixture
def trace(tmp_path: Path) -> Iterator[TraceWriter]:
    writer = TraceWriter(tmp_path / "trace.jsonl")
    yield writer
    writer.close()


def test_make_train_batch_drops_masked_samples_and_keeps_ids_with_rows(trace: TraceWriter) -> None:
    rollouts = Rollouts(
        [
            sample(0, "a", 0, 1.0, [5, 6]),
            sample(0, "a", 1, 0.0, [5]),
            sample(0, "a", 2, 0.0, [7], verdict="error"),
            sample(1, "b", 0, 1.0, [8, 8, 8]),
        ]
    )
    cfg = cfg_with(
        old_logprobs="recompute", kl_coef=0.1, kl_mode="reward", kl_estimator="k1", advantage="drgrpo"
    )
    policy, ref = PolicyScorer(-0.5), Scorer(-1.0)
    batch, metrics = make_train_batch(rollouts, Models(policy, ref), step_plan(cfg, 0), trace=trace, step=1)
    assert batch is not None and policy.calls == 1 and ref.calls == 1
    assert batch.sample_ids == ["a#0", "a#1", "b#0"] and batch.group_ids.tolist() == [0, 0, 1]
    assert batch.old_logprobs is batch.recomputed_logprobs
    # KL in the reward, k1 = -0.5 - (-1) = 0.5 per token: rewards 1 - 0.1*2*0.5, 0 - 0.1*0.5, 1 - 0.1*3*0.5
    torch.testing.assert_close(batch.rewards, torch.tensor([0.9, -0.05, 0.85]))
    torch.testing.assert_close(
        batch.advantages, torch.tensor([0.475, -0.475, 0.0])
    )  # Dr.GRPO: r - group mean
    assert metrics["rollout/logprob_diff_max"] == pytest.approx(0.0)
    sub = batch.select([2, 0])
    assert sub.sample_ids == ["b#0", "a#0"] and sub.loss_mask.shape == (2, 3)
    torch.testing.assert_close(sub.advantages, batch.advantages[[2, 0]])
    assert sub.ref_logprobs is not None and sub.ref_logprobs.shape == (2, 3)


def test_make_train_batch_uses_the_engines_logprobs_without_a_pass(trace: TraceWriter) -> None:
    rollouts = Rollouts([sample(0, "a", 0, 1.0, [5]), sample(0, "a", 1, 0.0, [6])])
    policy = PolicyScorer(-9.0)
    batch, _ = make_train_batch(
        rollouts, Models(policy), step_plan(cfg_with(old_logprobs="rollout"), 0), trace=trace, step=1
    )
    assert batch is not None and policy.calls == 0
    assert batch.old_logprobs is not None and batch.old_logprobs.tolist() == [[-0.5], [-0.5]]
    none, _ = make_train_batch(
        Rollouts([sample(0, "a", 0, 1.0, [5], verdict="error")]),
        Models(policy),
        step_plan(cfg_with(), 0),
        trace=trace,
        step=1,
    )
    assert none is None  # nothing judged: the update is skipped


# ---- registries: honestly open ---------------------------------------------------------------------
def test_registered_plugin_names_validate_and_are_used(tmp_path: Path) -> None:
    def scripted(model_path: str, **kw: Any) -> str:
        return f"engine for {model_path}"

    def constant(rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.full_like(rewards, 0.25)

    ENGINES.register("scripted_test")(scripted)
    ESTIMATORS.register("constant_test")(constant)
    try:
        cfg = Config.model_validate(
            {**BASE, "rollout": {"engine": "scripted_test"}, "algorithm": {"advantage": "constant_test"}}
        )
        from reasoning_rl.rollout import make_engine

        assert make_engine(cfg.rollout.engine, str(tmp_path)) == f"engine for {tmp_path}"
        assert compute_advantages(cfg.algorithm.advantage, torch.ones(2), torch.zeros(2)).tolist() == [
            0.25,
            0.25,
        ]
    finally:
        ENGINES.unregister("scripted_test")
        ESTIMATORS.unregister("constant_test")
    path = tmp_path / "c.yaml"
    path.write_text("model: {path: m}\ndata: {train: {generator: fixed_digit}}\n")
    with pytest.raises(
        ConfigError, match=r"rollout.engine: .*unknown rollout engine 'scripted_test'.*'hf'.*'vllm'"
    ):
        load_config(path, ["rollout.engine=scripted_test"])
    with pytest.raises(ConfigError, match=r"unknown advantage estimator 'constant_test'.*'drgrpo'"):
        load_config(path, ["algorithm.advantage=constant_test"])


def test_entry_point_plugins_are_known_without_import(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = EntryPoint("ep_test", "reasoning_rl.algorithms.advantages:rloo", "reasoning_rl.advantages")
    monkeypatch.setattr(
        "reasoning_rl.registry.entry_points", lambda group: [ep] if group == "reasoning_rl.advantages" else []
    )
    try:
        assert AlgorithmConfig(advantage="ep_test").advantage == "ep_test"
        out = compute_advantages("ep_test", torch.tensor([1.0, 0.0]), torch.zeros(2))
        assert out.tolist() == [1.0, -1.0]  # RLOO, loaded through the entry point
    finally:
        ESTIMATORS.unregister("ep_test")


# ---- the engine owns its sleep state ---------------------------------------------------------------
class SleepyEngine:
    """Sleeps for real only when sleep mode is on (like vLLM on GPU); records weight loads."""

    def __init__(self, sleep_mode: bool) -> None:
        self.sleep_mode, self._asleep, self.loads = sleep_mode, False, 0
        self.version = 3  # the policy's version when the test begins (3 updates done)

    def stream(self, prompts: list[list[int]], sampling: SamplingConfig) -> Iterator[Completion]:
        raise AssertionError("not used")

    def generate(self, prompts: list[list[int]], sampling: SamplingConfig) -> list[Completion]:
        raise AssertionError("not used")

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], *, version: int) -> None:
        for _ in named_tensors:
            pass
        self.loads += 1
        self.version = version

    def sleep(self, keep_weights: bool = True) -> None:
        self._asleep = self._asleep or self.sleep_mode

    def wake(self) -> None:
        self._asleep = False

    @property
    def asleep(self) -> bool:
        return self._asleep


class TinyPolicy:
    peft = None

    def iter_full_params(
        self, bucket_bytes: int, dtype: torch.dtype | None = None
    ) -> Iterator[list[tuple[str, torch.Tensor]]]:
        yield [("w", torch.zeros(2))]


@pytest.mark.parametrize("sleep_mode", [True, False])
def test_engine_sleep_state_has_one_owner(sleep_mode: bool) -> None:
    engine = SleepyEngine(sleep_mode)
    parts = _components(cfg_with(), engine=engine)
    parts.engine_sleep()
    assert engine.asleep is sleep_mode
    parts.engine_ready(version=3)  # reloads weights exactly when the engine really slept (and dropped them)
    assert engine.loads == int(sleep_mode) and not engine.asleep
    assert engine.version == 3  # a reload is the current version's, not version 0's
    parts.engine_ready(version=3)
    assert engine.loads == int(sleep_mode)
    with pytest.raises(RuntimeError, match="engine holds policy version 3, the policy is at 4"):
        parts.engine_ready(version=4)  # awake at another version: a missed hand-off, never papered over
    off = _components(Config.model_validate({**BASE, "rollout": {"n": 4, "sleep": False}}), engine=engine)
    off.engine_sleep()
    assert not engine.asleep


def _components(cfg: Config, *, engine: Any) -> Components:
    return Components(
        cfg,
        "cpu",
        Path("m"),
        None,
        Models(TinyPolicy()),
        engine,
        None,
        [],
        [],  # type: ignore[arg-type]
        None,
        True,
        step_plan(cfg, pad_id=0),
    )


# ---- layering ----------------------------------------------------------------------------------------
def test_algorithms_are_pure_tensor_modules() -> None:
    """``algorithms/`` imports torch, the stdlib and the config / registry definitions only: no models,
    engines or trainer state (docs/architecture.md)."""
    import ast
    import sys

    allowed = (
        "torch",
        "reasoning_rl.algorithms",
        "reasoning_rl.config",
        "reasoning_rl.registry",
        "__future__",
    )
    root = Path(__file__).resolve().parents[2] / "reasoning_rl" / "algorithms"
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name.startswith(allowed), (
                    f"{path.name} imports {name}"
                )


def test_builtin_names_are_exactly_what_their_modules_register() -> None:
    """The registries list built-in names (so the torch-free config can validate them); importing each
    built-in module must register exactly those, so the list cannot drift from the code."""
    import reasoning_rl.algorithms.advantages  # noqa: F401
    import reasoning_rl.rollout.hf_engine  # noqa: F401

    assert set(ESTIMATORS.builtins) <= set(ESTIMATORS._registered)
    assert {n for n in ESTIMATORS._registered if not n.endswith("_test")} == set(ESTIMATORS.builtins)
    assert "hf" in ENGINES._registered


def test_engine_args_refuse_exactly_what_the_run_sets_itself() -> None:
    """``rollout.engine_args`` may not set what make_engine / the vLLM engine set from other keys: the
    refused names must follow make_engine's own keywords (plus vLLM's names for the model and log-probs)."""
    import inspect

    from reasoning_rl.rollout import make_engine

    params = inspect.signature(make_engine).parameters
    set_by_run = {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY} | {"model", "logprobs_mode"}
    for name in sorted(set_by_run):
        with pytest.raises(ValueError, match=name):
            RolloutConfig(engine_args={name: 1})
    RolloutConfig(engine_args={"max_num_seqs": 4})  # anything else goes through to vLLM


def test_make_train_batch_sets_the_rollout_correction_weights_from_the_recompute(trace: TraceWriter) -> None:
    """Engine log-probs -0.5 per token (``sample``); the recompute is -0.5 + log 1.5 on group 0 and
    -0.5 + log 3 on group 1: TIS weights 1.5 and min(3, cap 2) = 2; with MIS (geometric, [0.5, 2]) the
    ratio-3 sequence is dropped. The weights travel with a mini-batch selection into the update."""
    rollouts = Rollouts([sample(0, "a", 0, 1.0, [5, 6]), sample(1, "b", 0, 0.0, [8, 8, 8])])

    class Drifted(PolicyScorer):
        def logprobs(self, tokens: Any) -> Any:
            self.calls += 1
            shift = torch.tensor([[math.log(1.5)], [math.log(3.0)]])
            return (torch.full(tokens.shape, -0.5) + shift) * tokens.response_mask, None

    for mis, row1 in ((False, 2.0), (True, 0.0)):
        cfg = cfg_with(rollout_correction={"enabled": True, "mis": mis})
        batch, metrics = make_train_batch(
            rollouts, Models(Drifted(0.0)), step_plan(cfg, 0), trace=trace, step=1
        )
        assert batch is not None and batch.old_logprobs is batch.recomputed_logprobs
        assert batch.correction_weights is not None
        torch.testing.assert_close(batch.correction_weights, torch.tensor([[1.5, 1.5, 0.0], [row1] * 3]))
        assert metrics["mismatch/k1"] == pytest.approx((2 * math.log(1.5) + 3 * math.log(3.0)) / 5, rel=1e-5)
        assert metrics["correction/tis_clipped_frac"] == pytest.approx(3 / 5)
        mini = batch.select([0])
        assert mini.correction_weights is not None
        torch.testing.assert_close(mini.correction_weights, torch.tensor([[1.5, 1.5]]))
    off, _ = make_train_batch(
        rollouts, Models(Drifted(0.0)), step_plan(cfg_with(old_logprobs="recompute"), 0), trace=trace, step=1
    )
    assert off is not None and off.correction_weights is None  # off by default: weight 1


def test_update_hands_each_mini_batch_its_correction_weights(trace: TraceWriter) -> None:
    rollouts = Rollouts([sample(0, "a", 0, 1.0, [5, 6]), sample(0, "a", 1, 0.0, [8, 8, 8])])
    cfg = cfg_with(rollout_correction={"enabled": True}, mini_batch_size=1)
    plan = step_plan(cfg, 0)

    class Recorder(PolicyScorer):
        seen: list[Any] = []

        def train_step(
            self, tokens: Any, adv: Any, old: Any, ref: Any, a: Any, **kw: Any
        ) -> dict[str, float]:
            self.seen.append(kw["token_weights"])
            return {"loss": 0.0}

    policy = Recorder(-0.5 + math.log(1.5))
    batch, _ = make_train_batch(rollouts, Models(policy), plan, trace=trace, step=1)
    update(Models(policy), batch, plan, trace=trace, step=1)
    assert [w.tolist() for w in policy.seen] == [[[1.5, 1.5]], [[1.5, 1.5, 1.5]]]
