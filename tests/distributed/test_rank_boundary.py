"""The driver/rank boundary is typed (issue 43): no call crosses it by a string name, every method the driver
names is a real method of a rank class, and the three ``train_step``s (``Policy`` / ``PolicyView`` /
``ModelWorker``, and the critic's three) have one signature. Reads the source with ``ast``; no Ray."""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from reasoning_rl.distributed.rank import EngineRank, RankArgs, apply

SOURCE = Path(__file__).resolve().parents[2] / "reasoning_rl"
# the group's and the backends' dispatch methods: their first argument is the method a rank runs
DISPATCH = {
    "call",
    "call_all",
    "call_engines",
    "call_each_engine",
    "_each",
    "run",
    "run_engines",
    "_run",
    "_submit",
    "apply",
}
AFTER_TARGET = {"_run", "_submit", "apply"}  # these take the actor(s) or worker first, then the method
RANK_CLASSES = {
    "ModelWorker": "reasoning_rl.distributed.worker",
    "RolloutWorker": "reasoning_rl.distributed.rollout_worker",
    "EngineRank": "reasoning_rl.distributed.rank",
}


def _dispatch_calls() -> Iterator[tuple[str, ast.Call, int]]:
    """(file:line, call, the method's argument position) of every call to a dispatch method, or to a Ray
    actor's ``.call.remote``."""
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            remote = (
                isinstance(func, ast.Attribute)
                and func.attr == "remote"
                and isinstance(func.value, ast.Attribute)
                and func.value.attr == "call"
            )
            if name in DISPATCH or remote:
                yield f"{path.relative_to(SOURCE.parent)}:{node.lineno}", node, int(name in AFTER_TARGET)


def _method_refs() -> list[tuple[str, str, str]]:
    """(where, class, method) of every ``Class.method`` passed to a dispatch call as the method to run."""
    refs = []
    for where, call, at in _dispatch_calls():
        method = call.args[at] if len(call.args) > at else None
        # ``Class.method`` (a capitalised name): an attribute of a variable is a value, like ``tool.call``'s
        if (
            isinstance(method, ast.Attribute)
            and isinstance(method.value, ast.Name)
            and method.value.id[0].isupper()
        ):
            refs.append((where, method.value.id, method.attr))
    return refs


def test_no_rank_call_names_its_method_by_a_string() -> None:
    strings = [
        f"{where}: {ast.unparse(call)}"
        for where, call, at in _dispatch_calls()
        if any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in call.args[: at + 1])
    ]
    assert strings == []


def test_every_method_the_driver_names_is_a_rank_method() -> None:
    refs = _method_refs()
    assert len(refs) >= 25  # the walk sees the call sites (a rename of the dispatch methods would blind it)
    for where, cls_name, method in refs:
        assert cls_name in RANK_CLASSES, f"{where}: {cls_name}.{method} is not a rank class's method"
        cls = getattr(importlib.import_module(RANK_CLASSES[cls_name]), cls_name)
        assert not method.startswith("_") and inspect.isfunction(getattr(cls, method, None)), (
            f"{where}: {cls_name} has no method {method}"
        )
    named = {(c, m) for _, c, m in refs}
    assert {
        ("ModelWorker", "policy_train_step"),
        ("ModelWorker", "push_weights"),
        ("ModelWorker", "send_weights"),
        ("RolloutWorker", "receive_weights"),
        ("EngineRank", "engine_sleep"),
        ("EngineRank", "live_advance"),
        ("EngineRank", "engine_version"),
    } <= named


def test_the_dispatch_methods_take_a_method_reference_not_a_name() -> None:
    """The group's and the backends' dispatch parameters are typed callables (mypy then checks each call)."""
    for path in sorted((SOURCE / "distributed").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in DISPATCH:
                params = {a.arg: a.annotation for a in node.args.args + node.args.kwonlyargs}
                if "method" in params:
                    annotation = ast.unparse(params["method"]) if params["method"] is not None else ""
                    assert "Callable" in annotation, f"{path.name}: {node.name}(method: {annotation})"


def test_the_rank_classes_implement_their_protocols() -> None:
    """Each generating rank class answers every protocol method with its own (not the protocol's stub), and
    ``apply`` runs that one when the driver names the protocol's."""
    from reasoning_rl.distributed.rollout_worker import RolloutWorker
    from reasoning_rl.distributed.worker import ModelWorker

    for cls, proto in ((ModelWorker, EngineRank), (RolloutWorker, EngineRank)):
        assert proto in cls.__mro__
        for name, fn in inspect.getmembers(proto, inspect.isfunction):
            if not name.startswith("_"):
                assert getattr(cls, name) is not fn, f"{cls.__name__}.{name} is the protocol's stub"
    rollout = RolloutWorker(engine=None, handoff=None)
    assert apply(rollout, EngineRank.continuous, RankArgs()) is False


@pytest.mark.parametrize("method", [EngineRank.engine_sleep, EngineRank.live_submit])
def test_a_call_pickles_by_reference(method: Callable[..., Any]) -> None:
    """What ``RankActor.call`` receives survives pickling (Ray sends it so): the method by its qualified name."""
    method2, args2 = pickle.loads(pickle.dumps((method, RankArgs([1], flag=True))))
    assert method2 is method and args2.args == ([1],) and args2.kwargs == {"flag": True}


def _signature(fn: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    return [
        (p.name, p.kind, p.default, p.annotation)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    ]


def test_one_train_step_signature() -> None:
    """The driver's views and the rank's methods take exactly what ``Policy`` / ``Critic`` take (none drops a
    parameter; ``skip_zero_advantage`` travels in the loss config they all take)."""
    from reasoning_rl.distributed.views import CriticView, PolicyView
    from reasoning_rl.distributed.worker import ModelWorker
    from reasoning_rl.policy.critic import Critic
    from reasoning_rl.policy.policy import Policy

    policy = _signature(Policy.train_step)
    assert _signature(PolicyView.train_step) == policy == _signature(ModelWorker.policy_train_step)
    critic = _signature(Critic.train_step)
    assert _signature(CriticView.train_step) == critic == _signature(ModelWorker.critic_train_step)
