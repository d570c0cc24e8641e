"""Inside a long step something is said (issue 47): 5-10 minute GPU steps printed nothing and looked hung. The
heartbeat's line (stage, samples generated/graded, the update's micro-batch k/K, and its mini-batch k/K where there
are several) goes to the log every ``logging.heartbeat_s`` and to the live display at every report; redirected
output gets no live display. Driven by an injected clock: no test here waits."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from reasoning_rl.config import LoggingConfig
from reasoning_rl.trace import TraceWriter
from reasoning_rl.trainer.heartbeat import Heartbeat
from reasoning_rl.trainer.metrics import MetricsLogger


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_line_is_due_every_interval_and_says_stage_and_counts(tmp_path: Path) -> None:
    clock, got = Clock(), []
    beat = Heartbeat(30.0, lambda line, due: got.append((line, due)), clock=clock)
    trace = TraceWriter(tmp_path / "trace.jsonl")
    trace.on_progress = beat.report
    beat.tick()
    assert got == []  # no step yet: nothing to say
    beat.begin(3)
    clock.now += 10
    trace.progress("generate", generated=(12, 32), graded=(10, 32))
    assert got[-1] == ("step 3: generate (generated 12/32, graded 10/32), 10 s in", False)
    clock.now += 25
    beat.tick()  # the ticker: 35 s since the last due line
    assert got[-1] == ("step 3: generate (generated 12/32, graded 10/32), 35 s in", True)
    n = len(got)
    clock.now += 5
    beat.tick()
    assert len(got) == n  # not due again until 30 s later
    with trace.span("update", 3):  # a span's start names the stage; the update reports its mini-batches
        trace.progress("update", **{"mini-batch": (2, 4)})
    assert got[-1][0] == "step 3: update (mini-batch 2/4), 40 s in"
    trace.close()


def test_a_zero_interval_makes_every_report_due() -> None:
    got: list[tuple[str, bool]] = []
    beat = Heartbeat(0.0, lambda line, due: got.append((line, due)), clock=Clock())
    beat.begin(1)
    beat.report("generate", {"generated": (1, 4)})
    beat.report("generate", {"generated": (2, 4)})
    assert [due for _, due in got] == [True, True]
    beat.start()  # no ticker at interval 0
    beat.close()


def _logger(tmp_path: Path, terminal: bool) -> tuple[MetricsLogger, io.StringIO]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=200)
    cfg = LoggingConfig(console="rich", tensorboard=False)
    return MetricsLogger(tmp_path, cfg, total_steps=4, console=console), out


def test_redirected_output_gets_due_lines_only_and_no_live_display(tmp_path: Path) -> None:
    log, out = _logger(tmp_path, terminal=False)
    log.heartbeat("step 1: generate (generated 3/8), 5 s in", False)
    log.heartbeat("step 1: generate (generated 8/8), 31 s in", True)
    log.close()
    text = out.getvalue()
    assert text.splitlines() == ["heartbeat: step 1: generate (generated 8/8), 31 s in"]
    assert "\x1b[" not in text  # no cursor movement: no live display or bar in a log


def test_a_terminal_shows_the_line_live_instead_of_printing_lines(tmp_path: Path) -> None:
    log, out = _logger(tmp_path, terminal=True)
    log.heartbeat("step 1: update (mini-batch 1/2), 7 s in", True)
    log.close()
    text = out.getvalue()
    assert "step 1: update (mini-batch 1/2)" in text and "heartbeat:" not in text


UPDATE_LINE = re.compile(r"step 1: update(?: \((?P<counts>[^)]*)\))?, \d+ s in")


def _counts(line: str) -> dict[str, tuple[int, int]]:
    m = UPDATE_LINE.fullmatch(line)
    assert m is not None, line
    pairs = re.findall(r"([a-z -]+?) (\d+)/(\d+)", m.group("counts") or "")
    return {name.strip(): (int(k), int(of)) for name, k, of in pairs}


@pytest.mark.parametrize(("mini_batch_size", "ppo"), [(None, False), (3, False), (None, True)])
def test_an_update_reports_its_micro_batches_through_the_group(
    tiny_model_dir: Path, tmp_path: Path, mini_batch_size: int | None, ppo: bool
) -> None:
    """Inside a long update the line moved no further than "mini-batch 1/1" (the default: one mini-batch; issue 47
    follow-up): the policy's train step (and PPO's critic's) reports the micro-batch under way, k/K up to K/K,
    through the worker group the trainer calls it by; the mini-batch only where there are several."""
    import torch

    from reasoning_rl.config import AlgorithmConfig
    from reasoning_rl.distributed.group import WorkerGroup
    from reasoning_rl.distributed.views import group_models
    from reasoning_rl.distributed.worker import ModelWorker
    from reasoning_rl.factory import Models
    from reasoning_rl.policy import Critic, Policy, TokenBatch
    from reasoning_rl.trainer.plan import StepPlan
    from reasoning_rl.trainer.records import TrainBatch
    from reasoning_rl.trainer.update import update

    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(7, 90, (4 + 3 * (i % 3),), generator=g) for i in range(6)]
    tokens = TokenBatch(seqs, [3] * 6)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])  # no zero advantage: every row runs
    batch = TrainBatch(tokens, [f"s{i}" for i in range(6)], torch.arange(6) // 3, adv, adv, "policy")
    policy = Policy.from_pretrained(str(tiny_model_dir), micro_batch_tokens=12)  # a row or two a micro-batch
    critic = Critic.from_pretrained(str(tiny_model_dir), micro_batch_tokens=12) if ppo else None
    if critic is not None:
        batch.values, batch.returns = critic.values(tokens), tokens.response_mask.float()
    worker = ModelWorker(Models(policy, None, critic), None)
    models = group_models(WorkerGroup.local(worker), ref=False, critic=ppo)
    plan = StepPlan(AlgorithmConfig(mini_batch_size=mini_batch_size), "policy", 16, 0)
    got: list[str] = []
    beat = Heartbeat(0.0, lambda line, due: got.append(line), clock=Clock())
    trace = TraceWriter(tmp_path / "trace.jsonl")
    trace.on_progress = beat.report
    beat.begin(1)
    metrics = update(models, batch, plan, trace=trace, step=1)
    trace.close()
    reports = [_counts(line) for line in got]
    assert reports[0] == {}  # the span's start: "step 1: update, 0 s in"
    minis = sorted({c["mini-batch"] for c in reports if "mini-batch" in c})
    assert minis == ([] if mini_batch_size is None else [(1, 2), (2, 2)])
    for name in ["micro-batch", "critic micro-batch"] if ppo else ["micro-batch"]:
        for mini in minis or [None]:
            micro = [c[name] for c in reports if c.get("mini-batch") == mini and name in c]
            assert micro and micro == [(k, micro[0][1]) for k in range(1, micro[0][1] + 1)]  # 1/K ... K/K
    if mini_batch_size is None and not ppo:
        assert len(micro) == metrics["policy/micro_batches"] > 1
        assert got[-1] == f"step 1: update (micro-batch {len(micro)}/{len(micro)}), 0 s in"
