"""Runs INSIDE the sandbox, in the REPL child the fork server's zygote forks (stdlib only; ``protocol`` ships this
source ahead of ``_forkserver.py``'s, in one namespace): the interpreter that runs a session's cells one after
another in one scope, and the length-prefixed JSON messages on its pipes (cells in on fd 3, ``{"status": "ok" |
"error"}`` out on fd 4)."""

import json
import os
import struct
import sys

_CTL, _RES = 3, 4  # the child's message fds: cells in, results out


def _child(ctl_r, res_w, out_w, err_w):
    os.setsid()
    import fcntl

    devnull = os.open(os.devnull, os.O_RDWR)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (devnull, out_w, err_w, ctl_r, res_w)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(5, 1 << 16)
    import io
    import resource

    setup = _recv(_CTL)
    if setup is None:
        os._exit(0)
    for name, value in setup["rlimits"].items():
        resource.setrlimit(
            getattr(resource, name), tuple(value) if isinstance(value, list) else (value, value)
        )
    os.environ.clear()
    os.environ.update(setup["env"])
    os.chdir(setup["workdir"])
    del setup
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), "utf-8", "backslashreplace", line_buffering=True
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), "utf-8", "backslashreplace", line_buffering=True
    )
    import random

    random.seed(0)  # what a silent replay recomputes, when a recycled session needs one
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    scope = {"__name__": "__main__", "__builtins__": __builtins__, "exit": sys.exit, "quit": sys.exit}
    while True:
        msg = _recv(_CTL)
        if msg is None:
            os._exit(0)
        status = _cell(msg["code"], scope, msg["silent"])
        sys.stdout.flush()
        sys.stderr.flush()
        _send(_RES, {"status": status})


def _compile(src):
    import ast

    tree = ast.parse(src, "<cell>")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    return compile(tree, "<cell>", "exec"), (compile(last, "<cell>", "eval") if last is not None else None)


def _cell(src, scope, silent):
    """Run one cell REPL-style (a trailing expression's value is printed); "error" when it raised."""
    import io

    saved = sys.stdout, sys.stderr
    if silent:  # an earlier cell replayed into a new interpreter: the model saw its output already
        sys.stdout = sys.stderr = io.StringIO()
    try:
        body, last = _compile(src)
        exec(body, scope)
        if last is not None:
            value = eval(last, scope)
            if value is not None:
                print(repr(value))
        return "ok"
    except SystemExit:
        return "ok"
    except BaseException:  # noqa: BLE001 - shown to the model as the cell's error
        import traceback

        etype, value, tb = sys.exc_info()
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        sys.stdout.flush()
        sys.stderr.write("".join(traceback.format_exception(etype, value, tb)))
        return "error"
    finally:
        sys.stdout, sys.stderr = saved


def _send(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[os.write(fd, data) :]


def _recv(fd):
    head = _read(fd, 4)
    if head is None:
        return None
    body = _read(fd, struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body)


def _read(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
