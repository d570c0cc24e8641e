"""Runs INSIDE the sandbox, in the supervisor's process (stdlib only; ``protocol.supervisor_command`` ships this
source, the supervisor execs it at start and calls ``start_zygote`` before it reads any request): a warm
interpreter for python cells.

The zygote. At start, before any request exists, the supervisor forks a zygote: a copy of its then pristine
interpreter that keeps only a socket to the supervisor. On a session's first cell the zygote imports the
request's ``preload`` modules (sympy, numpy: hundreds of milliseconds, once per sandbox) and forks a REPL child
(copy-on-write), so a cell that imports them starts in milliseconds. The zygote is only ever sent module names
and the child's pipes (``fork``), pids (``status``) and ``check``: no cell, output or environment of any run
enters its memory, so no child can find an earlier run's bytes in the memory it starts with (a child forked
from the supervisor could: its freed heap held earlier requests). The zygote reaps its children and reports
their exit codes; the supervisor's clean-up spares it (it is undumpable like the supervisor, so a run cannot
read or ptrace it) and compares its inherited state (rlimits, priority, CPU set) after every run like its own:
a run that changed it, or killed the zygote, makes the sandbox unclean (replaced).

The child is a REPL: it runs cell after cell in one scope, so a session's later cells see the state the earlier
cells left, values from ``time``, ``os.urandom``, ``uuid`` or ``tempfile`` included, exactly as the model saw
them. A new child first runs the request's ``history`` silently (a session whose sandbox was recycled, or whose
interpreter died). It starts clean: its own process session, the run's env, rlimits and work dir (its first
message, read in its own memory), fds 0-2 = /dev/null and its output pipes, 3-4 its message pipes, every other
fd closed, and the zygote's non-dumpable flag (no ptrace, no prlimit, no /proc/<pid>/mem of another child).
Between sessions the supervisor ends the child and its clean-up (kill every process, wipe scratch dirs and IPC)
everything it left. Between a session's calls the supervisor kills every process but the child and stops the
child (SIGSTOP, threads included; SIGCONT at the next call), so nothing the call started burns CPU after it;
the child's RLIMIT_CPU is the session's CPU budget (``cpu_s``).

Trust. The result channel (fd 4) is the cell's to write to as well: the supervisor accepts only a well-formed
``{"status": "ok" | "error"}`` there; anything else is the interpreter failing ("died"). Once a session's code
ran here, a dead interpreter or zygote is that code's doing (a program failure), never ``sandbox_error``.
"""

import contextlib
import gc
import json
import math
import os
import selectors
import signal
import socket
import struct
import sys
import time

# On the host (lint, type checks) from the package; in the sandbox ``protocol`` ships _replchild.py's source
# ahead of this one, in the same namespace, and this import fails (no package there).
with contextlib.suppress(ImportError):
    from sandboxes._replchild import _child, _send

_DIST_PACKAGES = "/usr/lib/python3/dist-packages"  # Debian's python3-* modules; not on sys.path under -S
_CHECK_S = 5.0  # the zygote answers status and check at once; a stopped one makes the sandbox unclean
_state: dict = {"child": None, "zygote": None}
# Run once after a preload: sympy imports its solvers and fills its caches on first use (~80 ms a cell).
_WARM_UP = {
    "sympy": "x = sympy.Symbol('x'); sympy.solve(x**2 - 5*x + 6, x); sympy.simplify(sympy.sin(x)**2 + 1)",
    "numpy": "numpy.roots([1, -5, 6]); numpy.linalg.solve([[2.0, 1.0], [1.0, 3.0]], [1.0, 2.0])",
}


# ---- the supervisor's side ------------------------------------------------------------------------------------


class _Zygote:
    def __init__(self, pid, sock):
        self.pid, self.sock = pid, sock

    def ask(self, msg, fds=(), timeout=_CHECK_S):
        """The zygote's answer, or None when it is gone or does not answer in time (then it is killed: the
        sandbox has no zygote any more, so it is unclean and replaced)."""
        try:
            self.sock.settimeout(timeout)
            _send_msg(self.sock, msg, fds)
            answer = _recv_msg(self.sock)[0]
        except (OSError, ValueError):
            answer = None
        if answer is None:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            self.sock.close()
            _state["zygote"] = None
        return answer


def start_zygote(inherited_state):
    """Fork the zygote; called by the supervisor before it reads any request (``inherited_state``: the
    supervisor's own probe, run by the zygote on itself for ``check``)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # the zygote never returns
        try:
            ours.close()
            _zygote(theirs, inherited_state)
        finally:
            os._exit(0)
    theirs.close()
    _state["zygote"] = _Zygote(pid, ours)


def zygote_pid():
    """The zygote's pid while it lives (the supervisor's clean-up spares it), else None. Reaping it here, when
    it died, is what frees its pid: the clean-up stops sparing that number at the same moment."""
    zygote = _state["zygote"]
    if zygote is None:
        return None
    try:
        if os.waitpid(zygote.pid, os.WNOHANG)[0] == 0:
            return zygote.pid
    except ChildProcessError:
        pass
    _state["zygote"] = None
    return None


def zygote_ok():
    """The zygote lives, answers and still has the rlimits, priority and CPU set it started with."""
    zygote = _state["zygote"]
    return zygote is not None and (zygote.ask({"op": "check"}) or {}).get("same") is True


class _Child:
    def __init__(self, pid, ctl, res, out, err):
        self.pid, self.ctl, self.res, self.out, self.err = pid, ctl, res, out, err

    def status(self, wait):
        """None while it runs (``wait``: SIGKILLed first, so it ends), else its exit code."""
        if wait:
            with contextlib.suppress(OSError):
                os.killpg(self.pid, signal.SIGKILL)
        zygote = _state["zygote"]
        if zygote is None:
            return -9
        answer = zygote.ask({"op": "status", "pid": self.pid, "wait": wait})
        return -9 if answer is None else answer["code"]

    def end(self):
        code = self.status(wait=True)
        for fd in (self.ctl, self.res, self.out, self.err):
            with contextlib.suppress(OSError):
                os.close(fd)
        return code


def end_child():
    """End this sandbox's REPL child, if any (a session ended, or the sandbox passes to someone else)."""
    child, _state["child"] = _state["child"], None
    if child is not None:
        child.end()


def _spawn(header):
    """A REPL child forked by the zygote, sent its set-up (env, rlimits, work dir) as its first message."""
    zygote = _state["zygote"]
    if zygote is None:
        raise OSError("the sandbox's zygote is gone")
    pipes = [os.pipe() for _ in range(4)]  # cells, results, stdout, stderr
    theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]]
    try:
        answer = zygote.ask(
            {"op": "fork", "preload": header["repl"].get("preload", [])}, theirs, timeout=header["wall_s"]
        )
    finally:
        for fd in theirs:
            os.close(fd)
    ours = (pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0])
    if answer is None:
        for fd in ours:
            os.close(fd)
        raise OSError("the sandbox's zygote did not fork a child")
    child = _Child(answer["pid"], *ours)
    limits = dict(header.get("rlimits") or {})
    cap = header["repl"].get("address_space_mb")
    if cap:
        limits["RLIMIT_AS"] = min(limits.get("RLIMIT_AS", cap << 20), cap << 20)
    cpu_s = header["repl"].get("cpu_s")
    if (
        cpu_s
    ):  # the session's CPU budget: the interpreter lives as long as the session (SIGXCPU, then SIGKILL)
        limits["RLIMIT_CPU"] = (math.ceil(cpu_s), math.ceil(cpu_s) + 1)
    with contextlib.suppress(OSError):  # it died already: the first cell's result says so
        _send(child.ctl, {"rlimits": limits, "env": header["env"], "workdir": header["workdir"]})
    return child


def run(header):
    """Run the header's cell in this sandbox's REPL child (started, and fed the history, when there is none):
    ``(stopped_by, exit_code, stdout, stderr, outcome)`` with ``outcome`` "ok" | "error" (the cell ran; the
    interpreter lives on) or "died" (it ended: never replay that cell). A cell that runs out of time or output,
    or ends its interpreter, ends the child (the next request starts a new one). Once a session's code ran here,
    whatever breaks the interpreter or the zygote is that code's doing: a program failure, never ours."""
    repl = header["repl"]
    child = _state["child"]
    continuing = header.get("session") == "continue"
    todo = []
    if child is not None:
        with contextlib.suppress(OSError):
            os.kill(child.pid, signal.SIGCONT)  # frozen at the end of the session's last call
    if child is None or child.status(wait=False) is not None:
        if child is not None:
            child.end()  # its pipes
        try:
            child = _state["child"] = _spawn(header)
        except OSError as exc:
            if continuing:
                return "exit", None, b"", f"{_DIED}: {exc}\n".encode(), "died"
            return "sandbox_error", None, b"", f"{exc}\n".encode(), ""
        todo = [(src, True) for src in repl.get("history", ())]
    todo.append((repl["code"], False))
    end = time.monotonic() + header["wall_s"]
    cell_s = repl.get("cell_s") or header["wall_s"]
    out, err = bytearray(), bytearray()
    for src, silent in todo:
        deadline = min(end, time.monotonic() + cell_s)  # every cell its own budget, a replayed one too
        with contextlib.suppress(OSError):  # it died before reading the cell: its end is read next
            _send(child.ctl, {"code": src, "silent": silent})
        outcome = _collect(child, deadline, header["output_bytes"], out, err)
        if outcome not in ("ok", "error"):
            _state["child"] = None
            code = child.end()
            if outcome == "died":
                err += _death_note(code, repl.get("cpu_s")).encode()
                return "exit", code, bytes(out), bytes(err), "died"
            return outcome, None, bytes(out), bytes(err), ""
    return "exit", 0 if outcome == "ok" else 1, bytes(out), bytes(err), outcome


_DIED = "the python interpreter ended"


def _death_note(code, cpu_s):
    if code == -signal.SIGXCPU:
        return f"\n{_DIED}: it used up this session's CPU budget ({cpu_s:g} CPU-s)\n"
    if code is not None and code < 0:
        return f"\n{_DIED}: killed by signal {-code}\n"
    return f"\n{_DIED} (exit code {code})\n"


def freeze():
    """After a session's call: stop the interpreter (its threads too) until the session's next call, and
    return its pid, the one process of the call the clean-up spares (None when there is none)."""
    child = _state["child"]
    if child is None:
        return None
    with contextlib.suppress(OSError):
        os.kill(child.pid, signal.SIGSTOP)
    for _ in range(200):  # a stop is delivered asynchronously: wait until every thread has stopped
        if _stopped(child.pid):
            break
        time.sleep(0.005)
    return child.pid


def _stopped(pid):
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = []
        for task in tasks:
            with open(f"/proc/{pid}/task/{task}/stat") as fh:
                states.append(fh.read().rpartition(")")[2].split()[0])
    except OSError:
        return True  # gone: nothing left to stop
    return all(state in ("T", "t", "Z", "X") for state in states)


_REPLY_MAX = 64  # {"status": "error"} and no more: anything else on the result channel is not ours


def _collect(child, deadline, cap, out, err):
    """Read the child's output until its result message: "ok" | "error" | "died" | "timeout" | "output_limit".
    The result channel is the cell's to write to as well: only a well-formed ok/error reply counts; anything
    else (a forged status, garbage, a partial message) is the interpreter failing, i.e. "died"."""
    bufs = {child.out: out, child.err: err}
    reply = bytearray()
    with selectors.DefaultSelector() as sel:
        for fd in (child.out, child.err, child.res):
            sel.register(fd, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, 65536)
                if key.fd == child.res:
                    if not chunk:
                        _drain(bufs, cap)
                        return "died"
                    reply += chunk
                    status = _reply_status(reply)
                    if status is None:
                        continue
                    _drain(bufs, cap)
                    if any(len(b) > cap for b in bufs.values()):
                        return "output_limit"
                    return status
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
                if len(bufs[key.fd]) > cap:
                    del bufs[key.fd][cap:]
                    return "output_limit"


def _reply_status(raw):
    """ "ok" / "error" for a complete well-formed reply, "died" for anything malformed, None while incomplete."""
    if len(raw) < 4:
        return None
    size = struct.unpack(">I", bytes(raw[:4]))[0]
    if size > _REPLY_MAX or len(raw) > 4 + size:
        return "died"
    if len(raw) < 4 + size:
        return None
    try:
        msg = json.loads(bytes(raw[4:]))
    except ValueError:
        return "died"
    status = msg.get("status") if isinstance(msg, dict) else None
    return status if status in ("ok", "error") and len(msg) == 1 else "died"


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


# ---- the zygote -----------------------------------------------------------------------------------------------


def _zygote(sock, inherited_state):
    """Serve fork / status / check requests until the supervisor goes; reap children as they exit."""
    gc.collect()  # garbage holding fd numbers (none at supervisor start) is closed now, not in a child later
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)  # the supervisor's trusted pipes are not ours to hold
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    os.chdir("/")
    baseline = inherited_state()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd hears of every exit
    sock.setblocking(True)
    exits: dict = {}  # reaped pid -> exit code, until the supervisor asks
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fd == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap_into(exits)
                continue
            msg, fds = _recv_msg(sock)
            if msg is None:
                return
            if msg["op"] == "fork":
                reply = {"pid": _fork_child(msg["preload"], fds, (sock.fileno(), wake_r, wake_w))}
            elif msg["op"] == "status":
                reply = {"code": _status(msg["pid"], msg["wait"], exits)}
            else:
                reply = {"same": inherited_state() == baseline}
            _send_msg(sock, reply)


def _reap_into(exits):
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            exits[pid] = os.waitstatus_to_exitcode(status)


def _status(pid, wait, exits):
    _reap_into(exits)
    if pid not in exits and wait:
        with contextlib.suppress(ChildProcessError):
            exits[pid] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if pid in exits:
        return exits.pop(pid)
    return None if not wait else -9  # never ours, or already reported


def _fork_child(preload, fds, zygote_fds):
    _preload(preload)
    gc.collect()
    pid = os.fork()
    if pid == 0:  # the child never returns
        try:
            for fd in zygote_fds:
                os.close(fd)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child(*fds)
        except BaseException as exc:  # noqa: BLE001 - the set-up failed: say why on its stderr pipe
            with contextlib.suppress(OSError, IndexError):
                os.write(fds[3], f"the python interpreter failed: {exc!r}\n".encode())
        finally:
            os._exit(70)
    for fd in fds:
        os.close(fd)
    return pid


def _preload(modules):
    """Import ``modules`` into the zygote once; a module the image lacks is skipped (the cell's own import then
    fails as it would anywhere)."""
    if os.path.isdir(_DIST_PACKAGES) and _DIST_PACKAGES not in sys.path:
        sys.path.append(_DIST_PACKAGES)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"  # no BLAS thread pool in the zygote: fork copies only the calling thread
    fresh = False
    for name in modules:
        if name not in sys.modules:
            try:
                module = __import__(name)
            except ImportError:
                continue
            fresh = True
            if name in _WARM_UP:
                exec(_WARM_UP[name], {name: module})
    if fresh:
        gc.collect()
        gc.freeze()  # never scanned again: cheap collections, and the children's pages stay shared


def _send_msg(sock, obj, fds=()):
    """One JSON message on the zygote's socket, with ``fds`` passed along (SCM_RIGHTS)."""
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))] if fds else []
    sent = sock.sendmsg([data], ancillary)
    sock.sendall(data[sent:])


def _recv_msg(sock):
    """(message, fds) from the zygote's socket; (None, []) when the other side is gone."""
    head, fds = b"", []  # type: bytes, list
    while len(head) < 4:
        chunk, ancillary, _, _ = sock.recvmsg(4 - len(head), socket.CMSG_SPACE(8 * 4))
        if not chunk:
            return None, []
        head += chunk
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += struct.unpack(f"{len(raw) // 4}i", raw[: len(raw) // 4 * 4])
    size, body = struct.unpack(">I", head)[0], b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            return None, []
        body += chunk
    return json.loads(body), fds
