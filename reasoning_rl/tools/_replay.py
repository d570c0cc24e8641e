"""Runs INSIDE the sandbox (stdlib only): replays a trajectory's earlier cells silently, then runs the new cell
with its output shown, REPL-style (the value of a trailing expression is printed). ``random`` is seeded first,
so a replay recomputes exactly what the model saw. Exit status 1 when the new cell raised. ``argv[1]``: an address-space
cap in MB, so a memory bomb fails fast with a ``MemoryError`` the model can read (the sandbox's cgroup limit stays the
hard bound; reaching it takes the OOM killer seconds on a loaded machine)."""

import ast
import contextlib
import io
import json
import resource
import sys


def _compile(src):
    tree = ast.parse(src, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return compile(tree, "<cell>", "exec"), (compile(last, "<cell>", "eval") if last is not None else None)


def _run(src, scope):
    body, last = _compile(src)
    exec(body, scope)
    if last is not None:
        value = eval(last, scope)
        if value is not None:
            print(repr(value))


def main():
    cap = int(sys.argv[1]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with open("cells.json") as fh:
        cells = json.load(fh)
    if any("random" in src for src in cells):  # imported only when used: start-up time is per call
        import random

        random.seed(0)
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    for src in cells[:-1]:
        # the model already saw this cell's output and error: replay it silently
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            contextlib.suppress(BaseException),
        ):
            _run(src, scope)
    try:
        _run(cells[-1], scope)
    except SystemExit:
        pass
    except BaseException:  # noqa: BLE001 - shown to the model as the cell's error
        import traceback

        etype, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        sys.stdout.flush()
        sys.stderr.write("".join(traceback.format_exception(etype, value, tb)))
        sys.exit(1)


if __name__ == "__main__":
    main()
