"""Runs INSIDE the sandbox (any python3 >= 3.8, stdlib only): the two Lean runs of one check.

1. ``lean --json -o Proof.olean Proof.lean``: elaborates the response (untrusted from here on). Its stdout is a
   pty when one is available, so Lean flushes each message and a run cut by the clock still shows how far it got.
2. Every process run 1 left behind is killed (we are their subreaper, so none escapes by daemonising).
3. Only then, in a directory created after run 1 is dead, a trusted ``Audit.lean`` imports a copy of the
   compiled ``.olean`` and prints the axioms of the theorem: nothing the response ran can reach this run, and
   nothing in any file the response could read tells it what the report will look like.

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
import tempfile
import time

_STDOUT_CAP = 256 << 10  # whole lines of Lean's JSON messages (more is cut: details only)
_STDERR_CAP = 16 << 10  # the tail (a crash or stack overflow report)
_DRAIN_S = 0.2  # output still read after Lean exited
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value):
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort: the sandbox's own namespace is the backstop
        pass


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


def _run(argv, cwd, env, timeout_s):
    """Run ``argv``; its stdout and stderr (capped), exit code (None when killed by our clock), wall time."""
    out_r, out_w = _open_stdout()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                            close_fds=True)  # fmt: skip
    os.close(out_w)
    os.close(err_w)
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
    _reap_all()
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


def _reap_all():
    """Kill every descendant (orphans re-parent to us, the subreaper) until none is left."""
    for _ in range(1000):
        children = _children()
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


def main():
    with open(sys.argv[1]) as fh:
        config = json.load(fh)
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    workdir = os.getcwd()
    env = dict(os.environ)
    lean, flags = config["lean"], config["flags"]
    frame = {"proof": _run([lean, "--json", *flags, "-o", config["olean"], config["file"]], workdir, env,
                           config["timeout_s"]), "audit": None}  # fmt: skip
    if frame["proof"]["exit"] == 0:
        audit_dir = tempfile.mkdtemp(prefix="rrl-audit-", dir=workdir)
        if _copy_regular(os.path.join(workdir, config["olean"]), os.path.join(audit_dir, config["olean"])):
            with open(os.path.join(audit_dir, "Audit.lean"), "w") as fh:
                fh.write(config["audit"])
            search = [p for p in env.get("LEAN_PATH", "").split(os.pathsep) if p] + [audit_dir]
            audit_env = dict(env, LEAN_PATH=os.pathsep.join(search))
            frame["audit"] = _run(
                [lean, "--json", *flags, "Audit.lean"], audit_dir, audit_env, config["timeout_s"]
            )
        else:
            frame["audit"] = {"missing_olean": True}
    sys.stdout.buffer.write(("rrl-lean-audit " + json.dumps(frame, ensure_ascii=False) + "\n").encode())
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
