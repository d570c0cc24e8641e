"""What a run says about itself (issue 30): a step with no judged sample stops the run, a high error share
warns, errors are counted under the component's grader that caused them with a bounded reason key, the share
of zero-variance groups is a metric, and Ctrl-C names the step, the checkpoint and how to continue."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from graders.compose import RewardTerm, compose
from graders.types import Grade
from reasoning_rl.checkpoint import CheckpointManager
from reasoning_rl.config import OverlongConfig, load_config
from reasoning_rl.data import Example
from reasoning_rl.rollout import Completion
from reasoning_rl.trainer.grading_health import check_grading
from reasoning_rl.trainer.interrupt import interrupted_message, interrupts_held
from reasoning_rl.trainer.records import Sample
from reasoning_rl.trainer.resume import TrainError
from reasoning_rl.trainer.rewards import rewards_and_mask, sample_metrics

TERMS = (RewardTerm("answer", "math", 1.0), RewardTerm("style", "my_pkg:Style", 0.5))


def sample(group: int, grade: Grade, composed: bool = False) -> Sample:
    ex = Example(f"p{group}", "s", ({"role": "user", "content": "q"},), "1", "math")
    comp = Completion(group, 0, [1], [1, 2], [0.0, 0.0], "x", "stop")
    if not composed:
        return Sample(group, ex, comp, grade)
    result = compose(TERMS, [Grade.correct(), grade])
    return Sample(group, ex, comp, result.grade, result)


def metrics(samples: list[Sample]) -> dict[str, float]:
    rewards, mask = rewards_and_mask(samples, max_tokens=8, overlong=OverlongConfig())
    return sample_metrics(samples, rewards, mask)


def test_errors_are_counted_under_the_component_that_caused_them() -> None:
    samples = [sample(0, Grade.error("style grader: could not parse the response"), composed=True)] * 2
    samples += [sample(1, Grade.correct(), composed=True), sample(1, Grade.incorrect())]
    m = metrics(samples)
    assert m["grading/my_pkg:Style/error"] == 2 and "grading/math/error" not in m
    assert m["grading/error_component/style"] == 2
    # the reason's text is no metric key: a prefix that is no identifier counts as 'other'
    assert m["grading/error_reason/other"] == 2
    assert not [k for k in m if "parse" in k or " " in k]
    assert metrics([sample(0, Grade.error("timeout: no grade in 10s"))])["grading/error_reason/timeout"] == 1


def test_share_of_zero_variance_groups() -> None:
    samples = [sample(0, Grade.correct()), sample(0, Grade.correct())]  # equal rewards
    samples += [sample(1, Grade.correct()), sample(1, Grade.incorrect())]  # signal
    samples += [sample(2, Grade.incorrect()), sample(2, Grade.error("timeout"))]  # one judged: no signal
    samples += [sample(3, Grade.error("timeout"))]  # nothing judged: not a group of the share
    assert metrics(samples)["reward/frac_zero_std"] == pytest.approx(2 / 3)


def test_a_step_with_no_judged_sample_stops_the_run(tmp_path: Path) -> None:
    errors = [sample(g, Grade.error("style grader: could not parse"), composed=True) for g in range(4)]
    with pytest.raises(TrainError) as exc:
        check_grading(errors, step=3, warn_share=0.5, samples_file=tmp_path / "step_3.jsonl")
    text = str(exc.value)
    assert "step 3" in text and "4 samples" in text and "'my_pkg:Style'" in text and "step_3.jsonl" in text
    assert "\n" not in text
    half = errors[:3] + [sample(0, Grade.correct())]
    warning = check_grading(half, step=1, warn_share=0.5, samples_file=None)
    assert warning is not None and "3 of 4" in warning and "grading.warn_error_share=0.5" in warning
    assert check_grading(half, step=1, warn_share=0.8, samples_file=None) is None
    assert check_grading([sample(0, Grade.correct())], step=1, warn_share=0.0, samples_file=None) is None


def _cfg(tmp_path: Path, *overrides: str):
    path = tmp_path / "c.yaml"
    path.write_text(
        f"run: {{name: r, dir: {tmp_path / 'run'}}}\nmodel: {{path: m}}\ndata: {{train: {{generator: arithmetic}}}}\n"
    )
    return load_config(path, ["trainer.steps=10", *overrides]), str(path)


def test_interrupted_message_says_step_checkpoint_and_how_to_continue(tmp_path: Path) -> None:
    cfg, path = _cfg(tmp_path)
    lines = interrupted_message(cfg, 0, path, ["rollout.n=4"])
    assert len(lines) == 2 and "before step 1 of 10" in lines[0]
    assert "no checkpoint" in lines[1] and "no step had finished" in lines[1] and "starts over" in lines[1]
    CheckpointManager(cfg.run_dir / "checkpoints").save(4, lambda d: None, {})
    lines = interrupted_message(cfg, 5, path, ["rollout.n=4", "trainer.resume=never"])
    assert "after step 5 of 10" in lines[0] and len(lines) == 2
    assert "step_4 (step 4)" in lines[1]
    assert lines[1].endswith(f"rrl train {path} rollout.n=4 trainer.resume=auto")


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """SIGINT at Python's own handler (KeyboardInterrupt), as in a terminal: pytest started with SIGINT ignored
    (``nohup``, ``cmd &`` in a script, some CI runners) inherits SIG_IGN and Python then installs no handler."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_inside_a_checkpoint_lets_it_finish_then_stops(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], python_sigint: None
) -> None:
    """DCP turns a KeyboardInterrupt inside its save into its own exception (CI saw exit 1 and a lost
    checkpoint): the signal is held until the save is done, then raised."""
    manager = CheckpointManager(tmp_path / "checkpoints")

    def write(d: Path) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        (d / "weights").write_text("w")

    with pytest.raises(KeyboardInterrupt), interrupts_held("the checkpoint of step 3"):
        manager.save(3, write, {})
    latest = manager.latest()
    assert latest is not None and latest.step == 3 and (latest.path / "weights").read_text() == "w"
    assert capfd.readouterr().err.count("interrupt: finishing the checkpoint of step 3 first") == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with interrupts_held("nothing"):  # no signal: nothing raised
        pass


def test_held_interrupts_go_to_the_handler_that_was_there(tmp_path: Path) -> None:
    """A runner that ignores SIGINT still ignores it after the hold (no KeyboardInterrupt appears)."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held("x"):
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_second_ctrl_c_stops_a_checkpoint_at_once(tmp_path: Path, python_sigint: None) -> None:
    """A hung save must stay stoppable: the second press is delivered inside it, and a save that wraps the
    KeyboardInterrupt in its own error (as DCP does) still ends as KeyboardInterrupt; nothing is saved."""
    manager = CheckpointManager(tmp_path / "checkpoints")

    def write(d: Path) -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            (d / "weights").write_text("w")
        except KeyboardInterrupt as exc:
            raise RuntimeError("CheckpointException ranks:dict_keys([0])") from exc

    with pytest.raises(KeyboardInterrupt) as err, interrupts_held("the checkpoint of step 3"):
        manager.save(3, write, {})
    assert isinstance(err.value.__cause__, RuntimeError)
    assert manager.latest() is None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
