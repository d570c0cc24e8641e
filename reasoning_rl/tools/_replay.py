"""Runs INSIDE the sandbox (stdlib only): replays a trajectory's earlier cells silently, then runs the new cell
with its output shown, REPL-style (the value of a trailing expression is printed). ``random`` is seeded first,
so a replay recomputes exactly what the model saw. Exit status 1 when the new cell raised. ``argv[1]``: an
address-space cap in MB, so a memory bomb fails fast with a ``MemoryError`` the model can read (the sandbox's
cgroup limit stays the hard bound; reaching it takes the OOM killer seconds on a loaded machine); ``argv[2]``:
the number of cells, in files ``cell_0`` ... (one file each: nothing to parse).

Start-up time is the tool's latency, so this imports only what the interpreter has loaded already (``_ast``
via ``compile``'s AST flag instead of ``ast``, which pulls in ``contextlib``/``enum``/``functools``; no
``json``), and runs under ``python3 -I -S`` (no ``site``: it imports ``os`` and the distribution's hooks; the
image has no site-packages). ``exit``/``quit``, which ``site`` would define, are put in the cells' scope.
"""

import _ast
import io
import resource
import sys

_ONLY_AST = 0x400  # ast.PyCF_ONLY_AST


def _compile(src):
    tree = compile(src, "<cell>", "exec", _ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    return compile(tree, "<cell>", "exec"), (compile(last, "<cell>", "eval") if last is not None else None)


def _run(src, scope):
    body, last = _compile(src)
    exec(body, scope)
    if last is not None:
        value = eval(last, scope)
        if value is not None:
            print(repr(value))


def _replay(src, scope):
    """Run an earlier cell with its output discarded: the model already saw its output and error."""
    out, err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = io.StringIO()
    try:
        _run(src, scope)
    except BaseException:  # noqa: BLE001, S110 - the model saw this cell's error already
        pass
    finally:
        sys.stdout, sys.stderr = out, err


def main():
    cap = int(sys.argv[1]) << 20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    cells = []
    for k in range(int(sys.argv[2])):
        with open(f"cell_{k}", encoding="utf-8") as fh:
            cells.append(fh.read())
    if any("random" in src for src in cells):  # imported only when used
        import random

        random.seed(0)
    scope = {"__name__": "__main__", "__builtins__": __builtins__, "exit": sys.exit, "quit": sys.exit}
    for src in cells[:-1]:
        _replay(src, scope)
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
