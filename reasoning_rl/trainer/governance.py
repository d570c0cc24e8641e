"""Grader governance in a run: which grader (name + version) judged each sample, recorded in samples, eval
rows and the run's trace metadata, and the graders' own golden cases checked before step 1."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from rich.console import Console

from graders.functions import FUNCTION_PREFIX, is_function_spec
from graders.runtime import GradingPool, resolve_grader


@cache
def grader_identity(spec: str) -> tuple[str, str]:
    """(name, version) of the grader behind a routing spec (a registered name or ``module:attr``)."""
    grader = resolve_grader(spec)
    return str(grader.name), str(grader.version)


def identity_fields(spec: str) -> dict[str, str]:
    """What a sample / eval row records about its grader (the same keys ``rrl grade`` writes)."""
    name, version = grader_identity(spec)
    return {"grader": name, "grader_version": version}


def run_graders(specs: Iterable[str]) -> dict[str, dict[str, str]]:
    """The run metadata's ``graders``: spec -> {name, version} for every grader the run routes to."""
    return {
        spec: dict(zip(("name", "version"), grader_identity(spec), strict=True))
        for spec in sorted(set(specs))
    }


def selftest_or_raise(
    specs: Iterable[str], pool: GradingPool, console: Console, options: Mapping[str, Mapping[str, Any]]
) -> None:
    """Grade the golden cases of these graders on the run's pool, where the run's ``grading.options`` put them
    (each grader's setup options: toolchain, sandbox); ``SelftestError`` listing every disagreement (the run
    has not started: nothing is trained on a grader that fails its own cases)."""
    from graders.selftest import SelftestError, failures_message, run_selftests

    results = run_selftests(sorted(set(specs)), pool, options)
    message = failures_message(results)
    if message is not None:
        raise SelftestError(message + "\n(skip with grading.selftest=false)")
    missing = [f"{r.name} {r.version} cannot run on this machine: {r.skipped}" for r in results if r.skipped]
    if missing:  # the run routes rows to it: every one of them would be an error, masked out of training
        raise SelftestError("\n".join(missing) + "\n(skip with grading.selftest=false)")
    checked = [f"{r.name} {r.version} ({r.cases} cases)" for r in results if r.cases]
    if checked:
        console.print(f"grader selftest ok: {', '.join(checked)}")
    bare = [r for r in results if not r.cases and r.skipped is None]
    unchecked = [f"{r.name} {r.version}" for r in bare if not is_function_spec(r.spec)]
    if unchecked:  # a plugin without cases is trusted unchecked: say so, never silently
        console.print(
            f"grader selftest: {', '.join(unchecked)} ship no golden cases, not checked "
            "(add a selftest.jsonl next to the grader: examples/custom_grader/README.md)"
        )
    functions = [r.spec for r in bare if is_function_spec(r.spec)]
    if functions:  # a function has no package of its own to ship cases in: say what checks it instead
        console.print(unchecked_functions_hint(functions), highlight=False, soft_wrap=True)


def unchecked_functions_hint(specs: list[str]) -> str:
    """What a run says of its reward functions (``function=module:fn`` specs): they ship no golden cases, and
    what their user can do instead: grade labelled rows with one, or wrap it in a grader class that ships cases."""
    names = ", ".join(spec.removeprefix(FUNCTION_PREFIX) for spec in specs)
    return (
        f"grader selftest: function(s) {names} have no golden cases, not checked (grade labelled rows with "
        f"`rrl grade ROWS.jsonl --grader {specs[0]}` and compare the verdicts, or wrap the function in a grader "
        "class that ships a selftest.jsonl: examples/custom_grader/README.md)"
    )
