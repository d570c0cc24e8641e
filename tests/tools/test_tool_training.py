"""Tools in training: the config keys, the loss mask through the train batch (loss, KL, advantages see model
tokens only), an infrastructure failure masked (never a fake 0), and (Docker) a CPU GRPO run with the python
tool end to end: reward logged, checkpoints, and a crash with tool calls in flight resumed with no sample lost
or duplicated."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tools_record
import torch
from rich.console import Console

from graders.runtime import GradingPool
from graders.types import Grade
from reasoning_rl.algorithms import policy_loss, token_rewards
from reasoning_rl.config import Config, ConfigError, GradingConfig, LossConfig, load_config
from reasoning_rl.data import Example, Prompt, PromptSampler
from reasoning_rl.factory import Models
from reasoning_rl.rollout import Completion, SamplingConfig
from reasoning_rl.rollout.stepped import as_continuous
from reasoning_rl.rollout.toolset import ToolSet
from reasoning_rl.tools import ToolResult
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.collect import RewardPlan
from reasoning_rl.trainer.frontier import Frontier
from reasoning_rl.trainer.plan import step_plan
from reasoning_rl.trainer.producers import ToolTurns
from reasoning_rl.trainer.records import Rollouts, Sample
from reasoning_rl.trainer.train_batch import make_train_batch

BASE: dict[str, Any] = {
    "model": {"path": "m"},
    "data": {"train": {"generator": "arithmetic", "size": 4}},
    "trainer": {"batch_size": 2},
    "rollout": {"n": 2},
}


def _config(**rollout: Any) -> Config:
    return load_config(None, base={**BASE, "rollout": {**BASE["rollout"], **rollout}})


def test_tool_keys_are_validated_against_the_registry() -> None:
    cfg = _config(tools=["python", "calculator"], max_turns=2, tool_options={"python": {"pool_size": 1}})
    assert cfg.rollout.tools == ["python", "calculator"] and cfg.rollout.tool_format == "fenced"
    for bad, words in [
        ({"tools": ["pyhton"]}, "unknown tool 'pyhton'"),
        ({"tools": ["calculator"]}, "add python to rollout.tools"),
        ({"tools": ["python"], "tool_options": {"calculator": {}}}, "tool_options for ['calculator']"),
        ({"tools": ["python", "python"]}, "more than once"),
        ({"tools": ["python"], "tool_format": "xml"}, "tool_format"),
    ]:
        with pytest.raises(ConfigError, match=None) as info:
            _config(**bad)
        assert words in str(info.value), str(info.value)
    assert _config(tools=["calculator"], tool_format="hermes").rollout.tools == ["calculator"]


def test_a_bad_tool_option_names_the_key() -> None:
    cfg = _config(tools=["python"], tool_options={"python": {"sandbx": "docker"}})
    with pytest.raises(ValueError, match=r"rollout.tool_options.python: .*sandbx"):
        ToolSet.from_config(cfg.rollout, tokenizer=None)  # type: ignore[arg-type]


# ---- the loss mask through the train batch ----------------------------------------------------------
MASK = [1, 1, 0, 0, 0, 1, 1]  # model call, tool output (3 tokens), model answer


def _sample(j: int, score: float, mask: list[int] | None) -> Sample:
    ex = Example(
        uid="a",
        data_source="s",
        messages=({"role": "user", "content": "q"},),
        ground_truth="1",
        grader="math",
    )
    ids = [5, 6, 7, 8, 9, 10, 11]
    lps = [-0.5 if m else 0.0 for m in (mask or [1] * 7)]
    comp = Completion(0, j, [1, 2], ids, lps, "t", "stop", mask=mask)
    return Sample(0, ex, comp, Grade.correct("") if score else Grade.incorrect(""))


class _Scorer:
    """Log-probs -0.5 on every response token (tool tokens included: the mask must drop them)."""

    def __init__(self, value: float, policy: bool) -> None:
        self.value, self.policy = value, policy

    def logprobs(self, tokens: Any) -> Any:
        b, t = tokens.shape
        lp = torch.full((b, t), self.value)
        return (lp, None) if self.policy else lp


def test_tool_tokens_are_out_of_the_loss_the_kl_and_the_advantages(tmp_path: Path) -> None:
    rollouts = Rollouts([_sample(0, 1.0, MASK), _sample(1, 0.0, MASK)])
    cfg = Config.model_validate(
        {
            **BASE,
            "algorithm": {
                "old_logprobs": "recompute",
                "kl_coef": 0.1,
                "kl_mode": "reward",
                "kl_estimator": "k1",
            },
        }
    )
    trace = TraceWriter(tmp_path / "trace.jsonl")
    batch, _ = make_train_batch(
        rollouts, Models(_Scorer(-0.5, True), _Scorer(-1.0, False)), step_plan(cfg, 0), trace=trace, step=1
    )
    trace.close()
    assert batch is not None
    assert batch.loss_mask.tolist() == [[bool(m) for m in MASK]] * 2
    # k1 KL 0.5 per *model* token (4 of 7): 1 - 0.1 * 4 * 0.5 = 0.8 and 0 - 0.2
    torch.testing.assert_close(batch.rewards, torch.tensor([0.8, -0.2]))
    # a sub-batch keeps the holes
    assert batch.select([1]).loss_mask.tolist() == [[bool(m) for m in MASK]]
    # the outcome sits on the last model token; PPO token rewards never land on a tool token
    mask = torch.tensor([[1, 1, 0, 0, 0, 0, 0], MASK], dtype=torch.bool)
    assert token_rewards(torch.tensor([1.0, 2.0]), mask)[:, :].nonzero().tolist() == [[0, 1], [1, 6]]
    # the policy loss has no gradient through tool-token log-probs
    lp = torch.full((2, 7), -0.4, requires_grad=True)
    loss, _ = policy_loss(
        lp, torch.full((2, 7), -0.5), batch.advantages, batch.loss_mask, LossConfig(loss_agg="token-mean")
    )
    loss.backward()
    assert lp.grad is not None
    assert (lp.grad[~batch.loss_mask] == 0).all() and (lp.grad[batch.loss_mask] != 0).all()


# ---- an infrastructure failure: error grade (masked), never a fake 0 ----------------------------------
class _BrokenSandbox:
    name = "python"
    description = "fails like a dead sandbox pool"
    parameters: dict[str, Any] = {"type": "object", "properties": {"code": {"type": "string"}}}

    async def call(self, arguments: dict[str, Any], *, session: str, budget_s: float) -> ToolResult:
        if "boom" in arguments.get("code", ""):
            return ToolResult("Error: the sandbox failed", "infra_error", detail="sandbox_error: pool gone")
        return ToolResult("2\n", "ok", 0.01)

    def end_session(self, session: str) -> None:
        """Stateless."""


def test_an_infrastructure_failure_is_an_error_sample_and_is_dropped_from_training(
    bpe_tokenizer: Any, tmp_path: Path
) -> None:
    from tools_testutil import ScriptedEngine

    good, bad = "What is 1 + 1?", "What is 2 + 2?"
    engine = ScriptedEngine(
        bpe_tokenizer,
        {
            good: ["```python\nprint(1 + 1)\n```\n", "so \\boxed{2}"],
            bad: ["```python\nboom\n```\n", "never"],
        },
    )

    def prompt(q: str) -> Prompt:
        ex = Example(q, "s", ({"role": "user", "content": q},), "2", "math")
        return Prompt(ex, engine.prompt(q))

    tools = ToolSet({"python": _BrokenSandbox()}, bpe_tokenizer)
    trace = TraceWriter(tmp_path / "trace.jsonl")
    sampling = SamplingConfig(n=1, max_tokens=64)
    with GradingPool(workers=1, timeout_s=20) as pool:
        frontier = Frontier(
            as_continuous(engine),  # type: ignore[arg-type]  # generates only: stepped
            pool, [prompt(good), prompt(bad)], RewardPlan(GradingConfig()), PromptSampler(2, 0, shuffle=False),
            batch=2, max_lag=0, sampling=lambda _: sampling, seed_for_step=lambda _: 0,
            tokenizer=bpe_tokenizer, resident=True, tools=ToolTurns(tools, sampling),
        )  # fmt: skip
        try:
            rollouts, _ = frontier.next_batch(1, trace)  # the scripted engine holds version 0
        finally:
            frontier.close()
    trace.close()
    ok, broken = rollouts.samples
    assert ok.grade.verdict == "correct", (ok.grade, ok.completion.text)
    assert ok.completion.turns[0].result.text == "2\n"
    assert broken.grade.verdict == "error" and "pool gone" in broken.grade.reason and broken.masked
    assert broken.completion.finish_reason == "error" and broken.completion.error
    cfg = Config.model_validate(BASE)
    batch, _ = make_train_batch(rollouts, Models(_Scorer(-0.5, True)), step_plan(cfg, 0), trace=trace, step=1)
    assert batch is not None and batch.sample_ids == [ok.id]
    records = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()]
    calls = [r["attrs"]["status"] for r in records if r.get("name") == "tool_latency_ms"]
    turns = [(r["value"], r["attrs"]["finish"]) for r in records if r.get("name") == "tool_turns"]
    assert sorted(calls) == ["infra_error", "ok"] and sorted(turns) == [(1.0, "error"), (1.0, "stop")]


# ---- a CPU GRPO run with the python tool, crash with calls in flight, resume --------------------------
def _run_config(tmp_path: Path, model: Path, name: str, **trainer: Any) -> Config:
    """``tools_record``'s scripted TIR run with the sandboxed python tool, 4 steps, a checkpoint every step."""
    return tools_record.tool_config(
        tmp_path,
        model,
        name,
        rollout={"tools": ["python"], "tool_options": {"python": {"sandbox": "docker", "pool_size": 2}}},
        trainer={"steps": 4, "checkpoint_every": 1, **trainer},
    )


def _samples(run: Path) -> dict[int, list[dict[str, Any]]]:
    return {
        int(p.stem.split("_")[1]): [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted((run / "samples").glob("step_*.jsonl"))
    }


def _key(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["id"], r["sample"], r["response"], r["verdict"]) for r in rows]


@pytest.fixture
def tir_engine() -> Iterator[Any]:
    import tir_engine

    yield tir_engine
    tir_engine.CRASH["after_loads"] = None


@pytest.mark.slow
@pytest.mark.docker
def test_grpo_with_the_python_tool_trains_checkpoints_and_resumes_mid_rollout(
    tmp_path: Path, tiny_model_dir: Path, tir_engine: Any
) -> None:
    from reasoning_rl.trainer.loop import Trainer

    quiet = Console(quiet=True)
    reference = Trainer(_run_config(tmp_path, tiny_model_dir, "ref"), console=quiet).run()
    ref_dir = reference.run_dir
    metrics = [json.loads(line) for line in (ref_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    rewards = [m["reward/mean"] for m in metrics]
    assert 0.0 < sum(rewards) / len(rewards) < 1.0  # right and wrong programs both ran, rewards logged
    assert all(m["tools/calls_per_sample"] == 1.0 and m["tools/errors"] == 0 for m in metrics)
    ref_samples = _samples(ref_dir)
    for rows in ref_samples.values():
        assert len(rows) == 8
        for r in rows:  # the answer was written from the real sandbox's output, which is in the context
            (turn,) = r["turns"]
            assert turn["status"] == "ok" and r["response"].endswith(f"\\boxed{{{turn['output'].strip()}}}")
            assert r["verdict"] == ("correct" if "+1)" not in turn["arguments"]["code"] else "incorrect")
    assert sorted(p.name for p in (ref_dir / "checkpoints").iterdir())[-1] == "step_4"

    tir_engine.CRASH["after_loads"] = 2  # crash in step 3, with other trajectories' python calls in flight
    with pytest.raises(tir_engine.SimulatedCrash):
        Trainer(_run_config(tmp_path, tiny_model_dir, "crash"), console=quiet).run()
    crash_dir = tmp_path / "crash"
    assert sorted(p.name for p in (crash_dir / "checkpoints").iterdir()) == ["step_1", "step_2"]
    tir_engine.CRASH["after_loads"] = None
    resumed = Trainer(_run_config(tmp_path, tiny_model_dir, "crash", resume="auto"), console=quiet).run()
    assert resumed.resumed_from == 2 and resumed.steps == 4
    got = _samples(crash_dir)
    assert {step: _key(rows) for step, rows in got.items()} == {
        step: _key(rows) for step, rows in ref_samples.items()
    }  # the in-flight step 3 redone once: nothing lost, nothing duplicated, same samples as without the crash
    resumed_metrics = [json.loads(line) for line in (crash_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in resumed_metrics] == [1, 2, 3, 4]
    for a, b in zip(metrics, resumed_metrics, strict=True):
        assert a["reward/mean"] == b["reward/mean"]


@pytest.mark.slow
@pytest.mark.docker
def test_rrl_eval_runs_the_same_tool_loop(tmp_path: Path, tiny_model_dir: Path, tir_engine: Any) -> None:
    from reasoning_rl.trainer.eval import run_eval

    cfg = _run_config(tmp_path, tiny_model_dir, "eval")
    cfg = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"n": 2, "max_prompts": 3})})
    result, path = run_eval(cfg, out=tmp_path / "eval.jsonl", console=Console(quiet=True))
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 3 and result.metrics["eval/prompts"] == 3.0
    for row in rows:
        for resp in row["responses"]:
            (turn,) = resp["turns"]  # the model's call, run in the sandbox, its output in the answer
            assert turn["status"] == "ok" and resp["text"].endswith(f"\\boxed{{{turn['output'].strip()}}}")
            assert resp["verdict"] == ("correct" if "+1)" not in turn["arguments"]["code"] else "incorrect")


def test_per_prompt_seeds_make_the_hf_engine_sample_independent_of_the_batch(tiny_model_dir: Path) -> None:
    """The multi-turn loop's waves mix trajectories; a prompt's sample must depend on its own seed only."""
    from reasoning_rl.rollout import make_engine

    engine = make_engine("hf", str(tiny_model_dir), max_model_len=64)
    a, b = [5, 6, 7], [8, 9]
    s = SamplingConfig(n=1, temperature=1.0, max_tokens=12, ignore_eos=True)
    both = engine.generate([a, b], s.model_copy(update={"prompt_seeds": (11, 22)}))
    alone = engine.generate([b], s.model_copy(update={"prompt_seeds": (22,)}))
    other = engine.generate([b], s.model_copy(update={"prompt_seeds": (23,)}))
    assert both[1].token_ids == alone[0].token_ids and other[0].token_ids != alone[0].token_ids
