"""Runs INSIDE the sandbox (any python3 >= 3.8, stdlib only): the two Lean runs of one check.

1. ``lean --json -o Proof.olean Proof.lean``: elaborates the response (untrusted from here on). Its stdout is a
   pty when one is available, so Lean flushes each message and a run cut by the clock still shows how far it got.
2. Every process run 1 left behind is killed (we are their subreaper, so none escapes by daemonising).
3. Only then, in a directory created after run 1 is dead, a trusted audit imports a copy of the compiled
   ``.olean`` and prints the axioms of the theorem: nothing the response ran can reach this run, and nothing
   in any file the response could read tells it what the report will look like.

The audit's Lean start-up (~50 ms of module initialisation, most of a short run) overlaps run 1: before run 1
starts we fork a child that loads the toolchain's ``libleanshared.so`` and calls its ``lean_main`` with
``--stdin``, so it initialises and then blocks reading the audit text, which we write only at step 3. It is a
fork without exec, so it keeps our non-dumpable flag: the response's processes (same uid, no capabilities)
can neither ptrace it, nor open its /proc mem or fds, nor read its environment (where the audit directory's
random name is). What they can do to it is signal it: we SIGCONT it at step 3, and when it is dead (or the
grader knows no ``libleanshared.so`` for the toolchain) the audit runs as a fresh ``lean`` instead.

Output: one JSON line (the frame). We are undumpable, so the response cannot write into our stdout via /proc.
Argument: the JSON config file written by the grader.
"""

import contextlib
import json
import os
import selectors
import signal
import stat
import subprocess
import sys
import time

_STDOUT_CAP = 256 << 10  # whole lines of Lean's JSON messages (more is cut: details only)
_STDERR_CAP = 16 << 10  # the tail (a crash or stack overflow report)
_DRAIN_S = 0.2  # output still read after Lean exited
_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value=0):
    """prctl's result, or None where it cannot be called (best effort: the sandbox is the backstop)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:  # noqa: BLE001 - no ctypes or no prctl here: callers treat None as "not done"
        return None


def _open_stdout():
    """(read end, write end) for the child's stdout: a raw pty (Lean line-flushes a tty), else a pipe."""
    try:
        import pty
        import tty

        master, slave = pty.openpty()
        tty.setraw(slave)
        return master, slave
    except Exception:  # noqa: BLE001 - no /dev/ptmx in this sandbox: a pipe works, only less informative
        return os.pipe()


def _run(argv, cwd, env, timeout_s, keep=()):
    """Run ``argv``; its stdout and stderr (capped), exit code (None when killed by our clock), wall time.
    Every process it leaves behind is killed, except the pids in ``keep``."""
    out_r, out_w = _open_stdout()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                            close_fds=True)  # fmt: skip
    os.close(out_w)
    os.close(err_w)
    return _collect(proc, out_r, err_r, started, timeout_s, keep)


def _collect(proc, out_r, err_r, started, timeout_s, keep=()):
    """Read ``proc``'s stdout and stderr until it exits (or the clock stops it), then reap; the run's report."""
    chunks = {out_r: [], err_r: []}  # type: dict[int, list[bytes]]
    sizes = {out_r: 0, err_r: 0}
    deadline = started + timeout_s
    timed_out, exited_at = False, None
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now > exited_at + _DRAIN_S:
                break  # a leftover child holds the pipes open: what it writes now is not Lean's output
            if now >= deadline:
                timed_out = proc.poll() is None
                break
            for key, _ in sel.select(min(deadline - now, 0.1)):
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # EIO: the pty's last writer closed it
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                    continue
                if key.fd == err_r or sizes[key.fd] < _STDOUT_CAP:
                    chunks[key.fd].append(data)
                    sizes[key.fd] += len(data)
                if key.fd == err_r and sizes[err_r] > 2 * _STDERR_CAP:
                    tail = b"".join(chunks[err_r])[-_STDERR_CAP:]
                    chunks[err_r], sizes[err_r] = [tail], len(tail)
    if timed_out:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    code = proc.wait()
    _reap_all(keep)
    for fd in chunks:
        os.close(fd)
    return {
        "exit": None if timed_out else code,
        "timed_out": timed_out,
        "wall_s": round(time.monotonic() - started, 4),
        "stdout": _whole_lines(b"".join(chunks[out_r])).decode("utf-8", "replace"),
        "stderr": b"".join(chunks[err_r])[-_STDERR_CAP:].decode("utf-8", "replace"),
    }


def _whole_lines(out):
    """At most ``_STDOUT_CAP`` bytes, cut after a newline so that every line kept is a whole message."""
    if len(out) <= _STDOUT_CAP:
        return out
    return out[: out.rfind(b"\n", 0, _STDOUT_CAP) + 1]


def _children():
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat_line = fh.read()
        except OSError:
            continue
        if stat_line[stat_line.rfind(")") + 2 :].split()[1] == me:
            found.append(int(entry))
    return found


def _reap_all(keep=()):
    """Kill every descendant (orphans re-parent to us, the subreaper) but ``keep`` until none is left."""
    for _ in range(1000):
        children = [pid for pid in _children() if pid not in keep]
        if not children:
            return
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def _copy_regular(src, dst):
    """Copy ``src`` (a regular file, never a link) into ``dst``; False when it is missing or not a file."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with open(dst, "wb") as out:
            out.write(fh.read())
    return True


class _Forked:
    """The warm audit Lean: a forked child running ``lean_main`` from the toolchain's shared library (see the
    module docstring for why a fork, not an exec). ``poll``/``kill``/``wait`` as on ``subprocess.Popen``."""

    def __init__(self, library, flags, search):
        stdin_r, self.stdin = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.started = time.monotonic()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns into the driver's code
            code = 127
            try:
                for fd, target in ((stdin_r, 0), (out_w, 1), (err_w, 2)):
                    os.dup2(fd, target)
                os.closerange(3, 1 << 16)
                for sig in (signal.SIGPIPE, signal.SIGINT):
                    signal.signal(sig, signal.SIG_DFL)
                os.environ["LEAN_PATH"] = os.pathsep.join(search)
                import ctypes

                lean = ctypes.CDLL(library)
                argv = [b"lean", b"--json", *(f.encode() for f in flags), b"--stdin"]
                code = lean.lean_main(len(argv), (ctypes.c_char_p * (len(argv) + 1))(*argv, None))
            except BaseException:  # noqa: BLE001 - reported on its stderr; the driver then audits with an exec
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)
        self.code = None

    def poll(self):
        if self.code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        return self.code

    def kill(self):
        if self.code is None:  # once reaped, the pid may belong to another process
            os.kill(self.pid, signal.SIGKILL)

    def wait(self):
        if self.code is None:
            _, status = os.waitpid(self.pid, 0)
            self.code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        return self.code

    def audit(self, text, timeout_s):
        """Hand it the audit text and read its report; None when it died before (the response may kill it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)  # the response may have stopped it
        try:
            if self.poll() is not None:
                raise BrokenPipeError
            os.write(self.stdin, text.encode())
            os.close(self.stdin)
        except OSError:
            self.close()
            return None
        return dict(_collect(self, self.out_r, self.err_r, time.monotonic(), timeout_s), warm=True)

    def close(self):
        """Stop it unused (the compile run failed, or it cannot be used)."""
        with contextlib.suppress(OSError):
            os.close(self.stdin)
        with contextlib.suppress(ProcessLookupError):
            self.kill()
        self.wait()
        for fd in (self.out_r, self.err_r):
            os.close(fd)


def _sysroot(library):
    """``<prefix>/lib/lean`` (the core .olean files) for ``<prefix>/lib[/lean]/libleanshared.so``: a forked
    child's Lean cannot find it from its executable, which is python3."""
    lib = os.path.dirname(library)
    return lib if os.path.basename(lib) == "lean" else os.path.join(lib, "lean")


def _audit(config, env, workdir, audit_dir, warm):
    """Step 3: copy the compiled theorem into a fresh directory and print its axioms in a trusted Lean run."""
    try:
        os.mkdir(audit_dir, 0o700)  # fails if anything is at this path already: its name was never readable
        copied = _copy_regular(os.path.join(workdir, config["olean"]), os.path.join(audit_dir, config["olean"]))
    except OSError:
        copied = False
    if not copied:
        if warm is not None:
            warm.close()
        return {"missing_olean": True}
    if warm is not None:
        report = warm.audit(config["audit"], config["timeout_s"])
        if report is not None:
            return report
    with open(os.path.join(audit_dir, "Audit.lean"), "w") as fh:
        fh.write(config["audit"])
    search = [p for p in env.get("LEAN_PATH", "").split(os.pathsep) if p] + [audit_dir]
    audit_env = dict(env, LEAN_PATH=os.pathsep.join(search))
    return _run([config["lean"], "--json", *config["flags"], "Audit.lean"], audit_dir, audit_env,
                config["timeout_s"])  # fmt: skip


def main():
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    workdir = os.getcwd()
    env = dict(os.environ)
    lean, flags = config["lean"], config["flags"]
    audit_dir = os.path.join(workdir, "rrl-audit-" + os.urandom(16).hex())
    library, warm = config.get("library"), None
    if library and _prctl(_PR_GET_DUMPABLE) == 0:  # a dumpable fork would be open to the response's ptrace
        search = [p for p in env.get("LEAN_PATH", "").split(os.pathsep) if p] + [_sysroot(library), audit_dir]
        warm = _Forked(library, flags, search)
    keep = (warm.pid,) if warm is not None else ()
    frame = {"proof": _run([lean, "--json", *flags, "-o", config["olean"], config["file"]], workdir, env,
                           config["timeout_s"], keep), "audit": None}  # fmt: skip
    if frame["proof"]["exit"] == 0:
        frame["audit"] = _audit(config, env, workdir, audit_dir, warm)
    elif warm is not None:
        warm.close()
    sys.stdout.buffer.write(("rrl-lean-audit " + json.dumps(frame, ensure_ascii=False) + "\n").encode())
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
