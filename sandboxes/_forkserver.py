"""Runs INSIDE the sandbox, in the supervisor's process (stdlib only; ``protocol.supervisor_command`` ships this
source and the supervisor execs it on the first ``repl`` request): a warm interpreter for python cells.

It imports the request's ``preload`` modules once (sympy, numpy: hundreds of milliseconds), then forks a child
(copy-on-write), so a cell that imports them starts in milliseconds. The child is a REPL: it runs cell after cell
in one scope, so a session's later cells see the state the earlier cells left, values from ``time``,
``os.urandom``, ``uuid`` or ``tempfile`` included, exactly as the model saw them. A new child first runs the
request's ``history`` silently (a session whose sandbox was recycled, or whose interpreter died).

Isolation. The parent never runs a cell, so no run can change what the next child starts from. The child starts
clean: its own process session, the header's env only, the run's rlimits, fds 0-2 = /dev/null and its output
pipes, 3-4 its message pipes, every other fd closed (the supervisor's request stream and frame socket are out of
reach), and it inherits the supervisor's non-dumpable flag (no ptrace, no prlimit, no /proc/<pid>/mem of it or of
another child). Between sessions the supervisor's clean-up (kill every process, wipe scratch dirs and IPC) ends
the child with everything else.

Known limit: the child is a copy of the supervisor's memory, whose freed heap may still hold bytes of earlier
requests served by this sandbox (other sessions' cell sources and outputs; never anything of the trusted side,
which the supervisor is never sent). The fix is a zygote forked at supervisor start, before any request is read,
that forks the children and passes their pipes over a unix socket.
"""

import contextlib
import gc
import json
import os
import selectors
import signal
import struct
import sys
import time

_DIST_PACKAGES = "/usr/lib/python3/dist-packages"  # Debian's python3-* modules; not on sys.path under -S
_CTL, _RES = 3, 4  # the child's message fds: cells in, results out
_state = {"child": None}
# Run once after a preload: sympy imports its solvers and fills its caches on first use (~80 ms a cell).
_WARM_UP = {
    "sympy": "x = sympy.Symbol('x'); sympy.solve(x**2 - 5*x + 6, x); sympy.simplify(sympy.sin(x)**2 + 1)",
    "numpy": "numpy.roots([1, -5, 6]); numpy.linalg.solve([[2.0, 1.0], [1.0, 3.0]], [1.0, 2.0])",
}


class _Child:
    def __init__(self, pid, ctl, res, out, err):
        self.pid, self.ctl, self.res, self.out, self.err = pid, ctl, res, out, err

    def alive(self):
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] == 0
        except ChildProcessError:
            return False  # reaped already (the supervisor's clean-up killed it)

    def end(self):
        with contextlib.suppress(OSError):
            os.killpg(self.pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            status = 0
        for fd in (self.ctl, self.res, self.out, self.err):
            with contextlib.suppress(OSError):
                os.close(fd)
        return os.waitstatus_to_exitcode(status)


def _preload(modules):
    """Import ``modules`` into this (the parent) process once; a module the image lacks is skipped (the cell's
    own import then fails as it would anywhere)."""
    if os.path.isdir(_DIST_PACKAGES) and _DIST_PACKAGES not in sys.path:
        sys.path.append(_DIST_PACKAGES)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # no BLAS thread pool in the parent: fork copies only the calling thread
    for name in modules:
        if name not in sys.modules:
            try:
                module = __import__(name)
            except ImportError:
                continue
            if name in _WARM_UP:
                exec(_WARM_UP[name], {name: module})
    gc.collect()
    gc.freeze()  # never scanned again: cheap collections, and the children's pages stay shared


def _spawn(header):
    # Garbage of earlier runs (a selector, a Popen's pipes) holds fd numbers: collected in the child, it would
    # close the child's own fds 0-4. Collected here first; what preload imported is frozen, so this is quick.
    gc.collect()
    (ctl_r, ctl_w), (res_r, res_w), (out_r, out_w), (err_r, err_w) = (os.pipe() for _ in range(4))
    pid = os.fork()
    if pid == 0:  # the child never returns
        try:
            _child(header, ctl_r, res_w, out_w, err_w)
        except BaseException as exc:  # noqa: BLE001 - the set-up failed: say why on its stderr pipe
            os.write(2, f"the python interpreter failed: {exc!r}\n".encode())
        finally:
            os._exit(70)
    for fd in (ctl_r, res_w, out_w, err_w):
        os.close(fd)
    return _Child(pid, ctl_w, res_r, out_r, err_r)


def _child(header, ctl_r, res_w, out_w, err_w):
    os.setsid()
    import fcntl

    devnull = os.open(os.devnull, os.O_RDWR)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (devnull, out_w, err_w, ctl_r, res_w)]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(5, 1 << 16)
    import io
    import resource

    limits = dict(header.get("rlimits") or {})
    cap = header["repl"].get("address_space_mb")
    if cap:
        limits["RLIMIT_AS"] = min(limits.get("RLIMIT_AS", cap << 20), cap << 20)
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.environ.clear()
    os.environ.update(header["env"])
    os.chdir(header["workdir"])
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


def run(header):
    """Run the header's cell in this sandbox's REPL child (started, and fed the history, when there is none):
    ``(stopped_by, exit_code, stdout, stderr)`` as the supervisor's ``_run`` returns them. A cell that runs out
    of time or output, or kills its interpreter, ends the child (the next request starts a new one)."""
    repl = header["repl"]
    child = _state["child"]
    todo = []
    if child is None or not child.alive():
        if child is not None:
            child.end()  # its pipes
        _preload(repl.get("preload", ()))
        child = _state["child"] = _spawn(header)
        todo = [(src, True) for src in repl.get("history", ())]
    todo.append((repl["code"], False))
    deadline = time.monotonic() + header["wall_s"]
    out, err = bytearray(), bytearray()
    for src, silent in todo:
        if not silent:
            cell_s = repl.get("cell_s") or header["wall_s"]
            deadline = min(deadline, time.monotonic() + cell_s)
        with contextlib.suppress(OSError):  # it died before reading the cell: its end is read next
            _send(child.ctl, {"code": src, "silent": silent})
        outcome = _collect(child, deadline, header["output_bytes"], out, err)
        if outcome not in ("ok", "error"):
            _state["child"] = None
            code = child.end()
            if outcome == "died":
                return "exit", code, bytes(out), bytes(err)
            return outcome, None, bytes(out), bytes(err)
    return "exit", 0 if outcome == "ok" else 1, bytes(out), bytes(err)


def _collect(child, deadline, cap, out, err):
    """Read the child's output until its result message: "ok" | "error" | "died" | "timeout" | "output_limit"."""
    bufs = {child.out: out, child.err: err}
    with selectors.DefaultSelector() as sel:
        for fd in (child.out, child.err, child.res):
            sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(remaining):
                if key.fd == child.res:
                    msg = _recv(child.res)
                    _drain(bufs, cap)
                    if msg is None:
                        return "died"
                    return "output_limit" if any(len(b) > cap for b in bufs.values()) else msg["status"]
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > cap:
                    del bufs[key.fd][cap:]
                    return "output_limit"


def _drain(bufs, cap):
    """Output the child wrote before its result message (already in the pipes)."""
    for fd, buf in bufs.items():
        os.set_blocking(fd, False)
        try:
            while len(buf) <= cap:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf += chunk
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)
        del buf[cap + 1 :]
