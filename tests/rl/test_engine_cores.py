"""``rollout.engine_cores``: several vLLM engine cores, each in a process of its own, behind one rollout engine
(``rollout/vllm_cores.py``); the weights shipped once per bucket to all of them (``vllm_transfer.ship``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from reasoning_rl.rollout.vllm_transfer import Packed, ship
from tests.distributed.test_group import _config as group_config
from tests.rl.test_engine_process import MIXED, _Worker


def test_engine_cores_need_the_engine_process_in_one_line_naming_both() -> None:
    with pytest.raises(ValueError, match="rollout.engine_cores=2 needs rollout.engine_process=true") as err:
        group_config(rollout={"engine_cores": 2})
    assert "\n" not in str(err.value).split("Value error, ")[-1].split(" [type=")[0]
    group_config(rollout={"engine_cores": 2, "engine_process": True})
    with pytest.raises(
        ValueError, match=r"rollout\.engine_process=true cannot be used with rollout\.max_lag"
    ):
        group_config(rollout={"engine_cores": 2, "engine_process": True, "max_lag": 1})


def test_engine_cores_are_refused_with_lora() -> None:
    with pytest.raises(
        ValueError, match=r"rollout\.engine_cores=2 cannot be used with model\.lora \(rank 8\)"
    ):
        group_config(rollout={"engine_cores": 2, "engine_process": True}, model={"lora": {"rank": 8}})
    group_config(rollout={"engine_cores": 1, "engine_process": True}, model={"lora": {"rank": 8}})


class _LLM:
    """An engine core's client stand-in: ``collective_rpc`` runs the target on its worker after every core has
    been called (a barrier: the calls must be issued at once, or this waits out its timeout and fails)."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.worker = _Worker()
        self.barrier = barrier
        self.calls = 0

    def collective_rpc(self, fn: Any, args: tuple[Any, ...]) -> list[Any]:
        self.barrier.wait(timeout=300)  # only a sequential ship (a bug) waits it out
        self.calls += 1
        return [fn(self.worker, *args)]


def test_ship_packs_each_bucket_once_and_every_core_loads_it_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import reasoning_rl.rollout.vllm_transfer as transfer

    packed: list[Packed] = []
    monkeypatch.setattr(transfer, "Packed", lambda group: packed.append(Packed(group)) or packed[-1])
    barrier = threading.Barrier(2)
    llms = [_LLM(barrier), _LLM(barrier)]
    sent = [MIXED[0], MIXED[3]]
    one_tensor = MIXED[0][1].numel() * 4  # a bucket holds one of them: two buckets
    ship(llms, sent, in_place=True, bucket_bytes=one_tensor)
    assert len(packed) == 2 and [llm.calls for llm in llms] == [2, 2]
    for llm in llms:
        assert torch.equal(llm.worker.model.a, sent[0][1]) and torch.equal(llm.worker.model.d, sent[1][1])
    assert all(p.bucket.path is not None and not Path(p.bucket.path).exists() for p in packed)  # freed


def test_each_runs_every_item_and_none_without_a_pool() -> None:
    from reasoning_rl.rollout.vllm_transfer import each

    assert each(lambda x: x * 2, []) == [] and each(lambda x: x * 2, [3]) == [6]
    assert each(lambda x: x * 2, [1, 2, 3]) == [2, 4, 6]
    with pytest.raises(ZeroDivisionError):
        each(lambda x: 1 // x, [1, 0])


def test_the_plan_counts_each_core_s_weights_working_set_and_context(tmp_path: Path) -> None:
    """Each core holds its own weights, vLLM working set and CUDA context; the KV cache is theirs together."""
    pytest.importorskip("transformers")
    from reasoning_rl.memory_plan.engine import ENGINE_ASLEEP
    from reasoning_rl.memory_plan.plan import DEVICE_RESERVE, plan_run
    from tests.rl.test_memory_plan import QWEN15, tiny_config
    from tests.rl.test_memory_plan_step import RUN

    def plan(cores: int) -> Any:
        cfg, shape = tiny_config(
            tmp_path,
            QWEN15,
            rollout={
                "max_tokens": 4096,
                "engine_process": True,
                "engine_cores": cores,
                "engine_args": {"max_num_seqs": 64},
            },
            trainer={"batch_size": 8},
        )
        return plan_run(cfg, shape, **RUN)

    one, two = plan(1), plan(2)
    assert one.fits and two.fits and one.engine is not None and two.engine is not None
    assert (
        two.engine.cores == 2 and two.engine.kv == one.engine.kv
    )  # the same sequences, dealt over the cores
    assert two.engine.total == one.engine.total + one.engine.weights + one.engine.overhead
    # through the update (asleep): what each sleeping core keeps, and its process's context
    assert two.update["engine"] == one.update["engine"] + ENGINE_ASLEEP + DEVICE_RESERVE
    line = next(x for x in two.lines() if x.startswith("engine "))
    assert "2 cores, each weights" in line and "(2 x " in line, line


def test_the_dry_run_shows_the_cores(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from reasoning_rl.cli.app import app
    from tests.trainer.test_example_h200_plans import REPO, shape_dir

    monkeypatch.chdir(REPO)
    model = shape_dir("QWEN25_1_5B", tiny_model_dir, tmp_path / "model")
    args = ["train", "examples/qwen15_grpo/config.yaml", "--dry-run", "--plan-for", "h200"]
    args += [f"model.path={model}", f"run.dir={tmp_path / 'run'}"]
    res = CliRunner().invoke(app, [*args, "rollout.engine_process=true", "rollout.engine_cores=2"])
    assert res.exit_code == 0, res.output
    assert "2 cores, each weights" in res.stdout and "dry run ok" in res.stdout


def test_the_factory_asks_for_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan's share and KV bytes are the cores' together (the engine splits them)."""
    from reasoning_rl import factory
    from tests.rl.test_memory_plan_step import H200, plan

    made: list[dict[str, Any]] = []
    monkeypatch.setattr(factory, "device_capacity", lambda device: H200)
    monkeypatch.setattr(factory, "rollout_kind", lambda cfg: "vllm")
    monkeypatch.setattr(factory, "make_engine", lambda kind, path, **kw: made.append(kw) or kw)
    p, cfg, _ = plan(tmp_path, engine_process=True, engine_cores=2)
    factory.engine_for(cfg, Path(cfg.model.path), "cuda", 8704, dtype="bfloat16")
    assert p.engine is not None and made[-1]["engine_cores"] == 2 and made[-1]["engine_process"] is True
    assert made[-1]["kv_cache_memory_bytes"] == p.engine.kv
    assert made[-1]["gpu_memory_utilization"] == p.engine.utilization(H200)
    _, single, _ = plan(tmp_path, engine_process=True)
    factory.engine_for(single, Path(cfg.model.path), "cuda", 8704, dtype="bfloat16")
    assert "engine_cores" not in made[-1]


class _Disagreeing:
    """An engine whose own check fails, as engine cores that disagree fail theirs (``VLLMCores``)."""

    max_model_len = 64

    def weight_fingerprints(self) -> Any:
        from reasoning_rl.rollout import RolloutError

        raise RolloutError("engine core 1 does not hold core 0's weights: tensor w")

    def score(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        raise AssertionError("not reached")

    def generate(self, prompts: list[list[int]], sampling: Any) -> list[Any]:
        raise AssertionError("not reached")


def test_an_engine_s_own_check_fails_the_gate_through_its_vote() -> None:
    """A ``RolloutError`` from the engine's check becomes the gate's ``WeightSyncError`` after the vote (every rank
    reaches it: a rank raising before it would leave the others waiting in the all-reduce), its cause kept."""
    from reasoning_rl.freshness import FreshnessGate, Probe, WeightSyncError
    from reasoning_rl.rollout import RolloutError
    from reasoning_rl.rollout.fingerprints import fingerprint_tensors

    gate = FreshnessGate(Probe.from_prompts([[1, 2, 3, 4]]))
    sent = fingerprint_tensors([("w", torch.ones(2))])
    with pytest.raises(WeightSyncError, match=r"step 3: engine core 1 does not hold core 0's weights") as err:
        gate.verify(torch.zeros(1, 2), _Disagreeing(), sent, step=3)
    assert isinstance(err.value.__cause__, RolloutError)


def _pids(engine: Any) -> list[int]:
    """Each core's engine-core process id."""
    return [
        p.pid for c in engine.cores for p in c.llm.llm_engine.engine_core.resources.engine_manager.processes
    ]


def _state(pid: int) -> str | None:
    """The process's state letter (/proc), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def _ended(pid: int, within: float = 0.0) -> bool:
    """The process has exited: no such process, or a zombie not yet reaped (vLLM's shutdown kills a core that
    outlives its grace period with SIGKILL, and nothing waits for it then). ``within``: seconds to wait for it,
    as a SIGKILL sent on a loaded machine is not acted on at once."""
    deadline = time.monotonic() + within
    while _state(pid) not in (None, "Z"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.vllm
@pytest.mark.slow
def test_two_engine_cores_serve_every_sample_and_exactly_the_weights_sent(tiny_model_dir: Path) -> None:
    """Two cores on the tiny model: whole generations and continuous requests dealt by prompt; a hand-off reaches
    both (through the freshness gate: every core's fingerprints and scores); a core left stale is named; close
    ends both processes."""
    from reasoning_rl.freshness import FreshnessGate, WeightSyncError
    from reasoning_rl.handoff import push_weights
    from reasoning_rl.policy import Policy
    from reasoning_rl.rollout import Request, RolloutError, SamplingConfig, make_engine
    from reasoning_rl.rollout.fingerprints import compare_fingerprints, fingerprint_tensors
    from reasoning_rl.rollout.vllm_cores import VLLMCores
    from tests.rl.test_freshness import PROMPTS, _train

    engine = make_engine(
        "vllm",
        str(tiny_model_dir),
        max_model_len=128,
        kv_cache_memory_bytes=64 << 20,
        engine_process=True,
        engine_cores=2,
    )
    assert isinstance(engine, VLLMCores)
    pids = _pids(engine)
    try:
        assert len(set(pids)) == 2 and not any(_ended(p) for p in pids)
        assert [c._scheduler() is None for c in engine.cores] == [
            True,
            True,
        ]  # both cores out of this process

        # whole generations: every (prompt, sample), indices and lengths right; equal prompts share a core
        prompts = [[5, 6, 7, 8], [9, 10, 11], [5, 6, 7, 8], [12, 13, 14, 15, 16]]
        sampling = SamplingConfig(n=3, max_tokens=5, temperature=1.0, seed=3, ignore_eos=True)
        done = engine.generate(prompts, sampling)
        assert [(c.prompt_index, c.sample_index) for c in done] == [
            (i, j) for i in range(4) for j in range(3)
        ]
        for c in done:
            assert c.prompt_ids == prompts[c.prompt_index]
            assert len(c.token_ids) == 5 and len(c.logprobs) == 5 and c.versions == [0] * 5
        # three distinct prompts dealt 0, 1, 0 (the repeat with the first): the next distinct one goes to core 1
        assert engine.deal(prompts) == [1, 0, 1, 1]

        # continuous requests: one prompt's samples on one core, both cores used, every request finished once
        requests = [
            Request(
                f"p{i}-s{j}",
                p,
                SamplingConfig(n=1, max_tokens=4, temperature=1.0),
                seed=10 * i + j,
                deltas=False,
            )
            for i, p in enumerate(prompts[:2] + prompts[3:])
            for j in range(3)
        ]
        engine.submit(requests)
        by_prompt: dict[str, set[int]] = {}
        for r in requests:
            by_prompt.setdefault(r.id.split("-")[0], set()).add(engine.core_of[r.id])
        assert list(by_prompt.values()) == [
            {0},
            {1},
            {0},
        ]  # the next distinct prompt: core 0, then round-robin
        assert engine.running() == 9
        finished: dict[str, Any] = {}
        while engine.core_of:
            for d in engine.advance():
                assert d.finished and d.id not in finished
                finished[d.id] = d
        assert sorted(finished) == sorted(r.id for r in requests) and engine.running() == 0
        assert all(len(d.token_ids) == len(d.logprobs) > 0 for d in finished.values())
        assert engine.sampled == sum(len(d.token_ids) for d in finished.values())

        # a hand-off through the gate reaches both cores: each holds the trainer's new weights
        policy = Policy.from_pretrained(str(tiny_model_dir), lr=1e-2, micro_batch_tokens=256)
        gate = FreshnessGate.for_run(engine, PROMPTS, None)
        before = [c.weight_fingerprints() for c in engine.cores]
        _train(policy, 1)
        stats = push_weights(policy, engine, gate=gate, version=1)
        assert stats.check is not None and stats.check.probe_gap < 1e-4 and engine.version == 1
        sent = fingerprint_tensors((n, t) for b in policy.iter_full_params(256 << 20, None) for n, t in b)
        for k, core in enumerate(engine.cores):
            held = core.weight_fingerprints()
            assert core.version == 1 and compare_fingerprints(sent, held) is None, k
            assert held != before[k]

        # a core left with older weights: the engine's fingerprints name it
        _train(policy, 2)
        engine.cores[0].load_weights(
            ((n, t) for b in policy.iter_full_params(256 << 20, None) for n, t in b), version=2
        )
        with pytest.raises(RolloutError, match=r"engine core 1 does not hold core 0's weights: tensor "):
            engine.weight_fingerprints()
        sent = fingerprint_tensors((n, t) for b in policy.iter_full_params(256 << 20, None) for n, t in b)
        with pytest.raises(WeightSyncError, match=r"step 2: engine core 1 does not hold core 0's weights"):
            gate.check(policy, engine, sent, step=2)
    finally:
        engine.close()
    assert all(_ended(p, within=120.0) for p in pids), {p: _state(p) for p in pids}
