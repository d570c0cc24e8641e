"""Runs INSIDE the sandbox (any python3 >= 3.8, stdlib only): the two Lean runs of one check.

1. ``lean --json -o Proof.olean Proof.lean``: elaborates the response (untrusted from here on). Its stdout is a
   pty when one is available, so Lean flushes each message and a run cut by the clock still shows how far it got.
   With the toolchain's own ``libleanshared.so`` known, this run is a fork calling ``lean_main`` under a
   seccomp filter that lets it start threads but no process or program (``_confine``): nothing the response
   runs can outlive that Lean, so nothing can rewrite the ``.olean`` between Lean's write and our copy.
2. Every process run 1 left behind is killed (we are their subreaper, so none escapes by daemonising); for a
   wrapper ``lean`` (an exec, not confined) this is the only guard of the ``.olean``.
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


class _Child:
    """A forked child, with ``poll``/``kill``/``wait`` as on ``subprocess.Popen``."""

    def __init__(self, pid):
        self.pid, self.code = pid, None

    def _reaped(self, status):
        self.code = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status

    def poll(self):
        if self.code is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._reaped(status)
        return self.code

    def kill(self):
        if self.code is None:  # once reaped, the pid may belong to another process
            os.kill(self.pid, signal.SIGKILL)

    def wait(self):
        if self.code is None:
            self._reaped(os.waitpid(self.pid, 0)[1])
        return self.code


def _fork_lean(library, argv, search, fds, confine):
    """Fork a child that runs ``lean_main(argv)`` from ``library`` with ``fds`` as its stdin, stdout, stderr
    (see the module docstring for why a fork, not an exec); ``confine``: it can start no process."""
    pid = os.fork()
    if pid:
        return _Child(pid)
    code = 127  # the child: never returns into the driver's code
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 1 << 16)
        for sig in (signal.SIGPIPE, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        os.environ["LEAN_PATH"] = os.pathsep.join(search)
        import ctypes

        lean = ctypes.CDLL(library)
        if confine:
            _confine()
        args = [a.encode() for a in argv]
        code = lean.lean_main(len(args), (ctypes.c_char_p * (len(args) + 1))(*args, None))
        ctypes.CDLL(None).fflush(None)
    except BaseException:  # noqa: BLE001 - reported on its stderr, and the exit code 127 says it failed
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


# seccomp: (audit arch, syscalls that would start a process or program) per machine; clone is allowed only
# with CLONE_THREAD (Lean's worker threads), clone3 answers ENOSYS so the C library falls back to clone.
# Then the calls that reach other processes: signals only to itself (kill, tgkill, rt_sigqueueinfo,
# rt_tgsigqueueinfo with its own pid), none by tkill, pidfd or ptrace, no process_vm_writev.
_SECCOMP = {
    # fork, vfork, execve, execveat, tkill, pidfd_send_signal, ptrace, process_vm_writev; clone; own-pid calls
    "x86_64": (0xC000003E, (57, 58, 59, 322, 200, 424, 101, 311), 56, (62, 234, 129, 297)),
    "aarch64": (0xC00000B7, (221, 281, 130, 424, 117, 271), 220, (129, 131, 138, 240)),
}
_CLONE3, _CLONE_THREAD, _X32 = 435, 0x10000, 0x40000000


def _confine():
    """This process and its threads can no longer start a process or run a program: what the response's
    elaboration does cannot outlive this Lean, so nothing of it is left to touch the ``.olean`` once we
    read it. Nor can it signal or trace another process (stopping or killing the driver would turn its
    own failure into a sandbox time-out, an ``error`` that training masks). Any other architecture's system
    calls (32-bit ones on x86_64) kill the process."""
    import ctypes

    arch, denied, clone, own_pid_only = _SECCOMP[os.uname().machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys, kill = 0x7FFF0000, 0x00050001, 0x00050026, 0x80000000
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0),
            (jge, 0, 1, _X32), (ret, 0, 0, eperm), (jeq, 0, 1, _CLONE3), (ret, 0, 0, enosys)]  # fmt: skip
    for nr in denied:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    for nr in own_pid_only:  # arg 0 is the target pid: allowed only when it is this process
        prog += [
            (jeq, 0, 4, nr),
            (ld, 0, 0, 16),
            (jeq, 0, 1, os.getpid()),
            (ret, 0, 0, allow),
            (ret, 0, 0, eperm),
        ]
    prog += [
        (jeq, 0, 3, clone),
        (ld, 0, 0, 16),
        (jset, 1, 0, _CLONE_THREAD),
        (ret, 0, 0, eperm),
        (ret, 0, 0, allow),
    ]

    class Filter(ctypes.Structure):
        _fields_ = [
            ("code", ctypes.c_ushort),
            ("jt", ctypes.c_ubyte),
            ("jf", ctypes.c_ubyte),
            ("k", ctypes.c_uint),
        ]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(prog))(*[Filter(*insn) for insn in prog])
    program = Program(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    ulong = ctypes.c_ulong
    if libc.prctl(38, ulong(1), ulong(0), ulong(0), ulong(0)) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if (
        libc.prctl(22, ulong(2), ulong(ctypes.addressof(program)), ulong(0), ulong(0)) != 0
    ):  # SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _owns(lean, library):
    """``library`` is ``lean``'s own (the same toolchain tree), not one lent to a wrapper around it."""
    root = os.path.dirname(os.path.dirname(library))
    root = os.path.dirname(root) if os.path.basename(os.path.dirname(library)) == "lean" else root
    return os.path.dirname(os.path.dirname(os.path.realpath(lean))) == os.path.realpath(root)


class _WarmAudit:
    """The trusted audit's Lean, started before the compile run: it initialises, then blocks on its stdin."""

    def __init__(self, library, flags, search):
        stdin_r, self.stdin = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.child = _fork_lean(library, ["lean", "--json", *flags, "--stdin"], search, (stdin_r, out_w, err_w),
                                confine=False)  # fmt: skip
        self.pid = self.child.pid
        for fd in (stdin_r, out_w, err_w):
            os.close(fd)

    def audit(self, text, timeout_s):
        """Hand it the audit text and read its report; None when it died before (the response may kill it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)  # the response may have stopped it
        try:
            if self.child.poll() is not None:
                raise BrokenPipeError
            os.write(self.stdin, text.encode())
            os.close(self.stdin)
        except OSError:
            self.close()
            return None
        return dict(_collect(self.child, self.out_r, self.err_r, time.monotonic(), timeout_s), warm=True)

    def close(self):
        """Stop it unused (the compile run failed, or it cannot be used)."""
        with contextlib.suppress(OSError):
            os.close(self.stdin)
        with contextlib.suppress(ProcessLookupError):
            self.child.kill()
        self.child.wait()
        for fd in (self.out_r, self.err_r):
            os.close(fd)


def _compile_forked(library, argv, search, timeout_s, keep):
    """The compile run as a confined fork (see ``_confine``): like ``_run``, with the same report."""
    out_r, out_w = _open_stdout()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    started = time.monotonic()
    child = _fork_lean(library, argv, search, (null, out_w, err_w), confine=True)
    for fd in (null, out_w, err_w):
        os.close(fd)
    return _collect(child, out_r, err_r, started, timeout_s, keep)


def _sysroot(library):
    """``<prefix>/lib/lean`` (the core .olean files) for ``<prefix>/lib[/lean]/libleanshared.so``: a forked
    child's Lean cannot find it from its executable, which is python3."""
    lib = os.path.dirname(library)
    return lib if os.path.basename(lib) == "lean" else os.path.join(lib, "lean")


def _audit(config, env, workdir, audit_dir, warm):
    """Step 3: copy the compiled theorem into a fresh directory and print its axioms in a trusted Lean run."""
    try:
        os.mkdir(audit_dir, 0o700)  # fails if anything is at this path already: its name was never readable
        copied = _copy_regular(
            os.path.join(workdir, config["olean"]), os.path.join(audit_dir, config["olean"])
        )
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
    search = [p for p in env.get("LEAN_PATH", "").split(os.pathsep) if p]
    audit = bool(config["audit"])  # empty: a compile run only (the grader's check of the trusted part alone)
    if audit and library and _prctl(_PR_GET_DUMPABLE) == 0:  # a dumpable fork would be open to ptrace
        warm = _WarmAudit(library, flags, [*search, _sysroot(library), audit_dir])
    keep = (warm.pid,) if warm is not None else ()
    argv = [lean, "--json", *flags, "-o", config["olean"], config["file"]]
    confined = bool(library) and _owns(lean, library) and os.uname().machine in _SECCOMP
    if confined:
        proof = _compile_forked(library, argv, [*search, _sysroot(library)], config["timeout_s"], keep)
    else:  # a wrapper (or an unknown toolchain): an exec, without the process confinement
        proof = _run(argv, workdir, env, config["timeout_s"], keep)
    frame = {"proof": dict(proof, confined=confined), "audit": None}
    if proof["exit"] == 0 and audit:
        frame["audit"] = _audit(config, env, workdir, audit_dir, warm)
    elif warm is not None:
        warm.close()
    sys.stdout.buffer.write(("rrl-lean-audit " + json.dumps(frame, ensure_ascii=False) + "\n").encode())
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
