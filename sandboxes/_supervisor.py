"""Runs INSIDE the sandbox (any python3 >= 3.8, stdlib only): writes the files, runs the command (or a python
cell in the fork server's REPL, ``_forkserver.py``, whose zygote it forks at start) with caps and a wall clock,
kills every leftover process of the sandbox user but that zygote, wipes the scratch dirs (POSIX shared memory,
semaphores and message queues live in ``/dev/shm`` and ``/dev/mqueue``), removes every System V IPC object
(shared memory is charged to the container's memory; queues and semaphores could carry data to the next run),
and reports one frame; a sandbox where any of that is left is reported unclean (the parent replaces it).

Protocol. stdin: one JSON header line, then ``stdin_len`` bytes for the command's stdin.
stdout: ``RRL1 <json>\\n`` followed by ``stdout_len`` + ``stderr_len`` bytes of captured output.
The supervisor shares its uid with the program, so it is not trusted for *correctness* (graders compare values
in the parent); it only makes limits cheap to enforce. The parent kills the whole sandbox as the backstop.
Undumpable, it cannot be ptraced or read through /proc; what the program can still change from outside (its
rlimits, priority, CPU set) is compared after every run, and a change makes the sandbox unclean.
"""

import base64
import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

_POLL_S = 0.02  # how often a run whose pipes stay open is checked for having exited
_DRAIN_S = 0.1  # output still accepted after the program exited (from children holding its pipes)
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


def _read_exact(stream, n):
    chunks, left = [], n
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            raise EOFError(f"header promised {n} stdin bytes, got {n - left}")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _oom_kills():
    for path in _OOM_FILES:
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except OSError:
            continue
    return -1


def _undumpable():
    """Hide our /proc entries (fd, mem, environ) and refuse ptrace to the same-uid program: it could otherwise
    take over our pipes to the trusted side and answer later runs' requests. False when that failed."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0 and libc.prctl(3, 0, 0, 0, 0) == 0  # PR_SET/GET_DUMPABLE
    except Exception:  # noqa: BLE001 - no ctypes or no prctl: say so, every run is then refused
        return False


_IOPRIO_GET_NR = {"x86_64": 252, "aarch64": 31}


def _io_priority():
    nr = _IOPRIO_GET_NR.get(os.uname().machine)
    if nr is None:
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(nr, 1, 0)  # IOPRIO_WHO_PROCESS, ourselves


def _inherited_state():
    """What a run inherits from us that the same-uid program may change from outside (prlimit, setpriority,
    sched_setaffinity, sched_setscheduler, ioprio_set; oom_score_adj if our /proc were writable): compared
    after every run, so a run that changed any of it retires the sandbox instead of passing it on."""
    import resource

    try:
        with open("/proc/self/oom_score_adj") as fh:
            oom = fh.read().strip()
        limits = [
            resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource)) if n.startswith("RLIMIT_")
        ]
        return (
            limits,
            os.getpriority(os.PRIO_PROCESS, 0),
            os.sched_getscheduler(0),
            sorted(os.sched_getaffinity(0)),
            _io_priority(),
            oom,
        )
    except OSError as exc:  # e.g. a lowered RLIMIT_NOFILE: we cannot vouch for the next run
        return repr(exc)


def _write_files(workdir, files):
    for rel, b64 in files.items():
        path = os.path.normpath(os.path.join(workdir, rel))
        if not path.startswith(workdir.rstrip("/") + "/"):
            raise ValueError(f"file name escapes the work dir: {rel!r}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(base64.b64decode(b64))


def _rlimits(limits):
    import resource

    def apply():
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply


def _feed(pipe, data):
    try:
        if data:
            pipe.write(data)
    except OSError:
        pass  # the program exited or closed stdin without reading it all: not our failure
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


def _run(header, stdin_data):
    cap = header["output_bytes"]
    proc = subprocess.Popen(
        header["command"],
        cwd=header["workdir"],
        env=header["env"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_rlimits(header["rlimits"]) if header.get("rlimits") else None,
    )
    threading.Thread(target=_feed, args=(proc.stdin, stdin_data), daemon=True).start()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()  # type: ignore[union-attr]
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + header["wall_s"]
    stopped_by = "exit"
    exited = False
    while sel.get_map():
        now = time.monotonic()
        if not exited and proc.poll() is not None:
            # Exited, but a background child still holds the pipes: drain briefly, then stop waiting.
            exited, deadline = True, min(deadline, now + _DRAIN_S)
        remaining = deadline - now
        if remaining <= 0:
            stopped_by = "exit" if exited else "timeout"
            break
        for key, _ in sel.select(min(remaining, _POLL_S)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = bufs[key.fd]
            buf += chunk
            if len(buf) > cap:
                del buf[cap:]
                stopped_by = "output_limit"
        if stopped_by != "exit":
            break
    if stopped_by == "exit":
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped_by = "timeout"  # closed its pipes but kept running
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    code = proc.wait()
    return stopped_by, code, bytes(bufs[out_fd]), bytes(bufs[err_fd])


def _kill_all(interpreter=None):
    """Kill every other process we may signal (children that outlived the run), but the fork server's zygote
    and, after a session's call, its ``interpreter``. Only safe in a pid namespace. Not ``kill(-1)``, which
    would take the zygote too: each round signals every pid but PID 1, us, the zygote and the interpreter (a
    process it cannot signal is not the run's), then checks that none is left (zombies count, but the
    interpreter's own: it reaps them itself); what forked meanwhile dies in the next round."""
    me = os.getpid()
    for _ in range(200):
        spared = {1, me, _FORKSERVER["zygote_pid"](), interpreter}
        for pid in _pids(spared):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        _reap()
        spared = {1, me, _FORKSERVER["zygote_pid"](), interpreter}
        left = [pid for pid in _pids(spared) if _signalable(pid)]
        if interpreter is not None:
            left = [pid for pid in left if not _zombie_of(pid, interpreter)]
        if not left:
            return True
        time.sleep(0.005)
    return False


def _pids(spared):
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in spared]


def _zombie_of(pid, parent):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return True  # gone
    return fields[0] == "Z" and int(fields[1]) == parent


def _signalable(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _reap():
    """Collect dead children (every orphan, as the local namespace's PID 1): zombies count as processes."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


_FORKSERVER: dict = {}  # the fork server's namespace (``_forkserver.py``, shipped as ``_FORKSERVER_SOURCE``)


def _wipe(dirs):
    """Empty the scratch dirs; never as root (unclean instead): run outside a sandbox, that would empty the
    host's /work and /tmp (it did once, from a test that ran this file on the host)."""
    if os.getuid() == 0:
        return False
    ok = True
    for top in dirs:
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            path = os.path.join(top, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    for root, subdirs, _ in os.walk(path):
                        for d in subdirs:
                            os.chmod(os.path.join(root, d), 0o700)
                    _rmtree(path)
                else:
                    os.unlink(path)
            except OSError:
                ok = False
    return ok


_SYSV_KINDS = ("shm", "msg", "sem")
_IPC_RMID = 0


def _sysv_ids(kind):
    try:
        with open("/proc/sysvipc/" + kind) as fh:
            rows = fh.read().splitlines()[1:]
    except OSError:
        return []
    return [int(row.split()[1]) for row in rows if row.strip()]


def _clear_sysv_ipc():
    """Remove every System V shared-memory segment, message queue and semaphore set (the program's uid owns or
    created them, so IPC_RMID is allowed); True when none is left."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:  # noqa: BLE001 - without ctypes nothing can be removed: the check below says unclean
        libc = None
    if libc is not None:
        for kind in _SYSV_KINDS:
            for ident in _sysv_ids(kind):
                if kind == "sem":
                    libc.semctl(ident, 0, _IPC_RMID)
                else:
                    getattr(libc, kind + "ctl")(ident, _IPC_RMID, None)
    return not any(_sysv_ids(kind) for kind in _SYSV_KINDS)


_KEYCTL_NR = {"x86_64": 250, "aarch64": 219}
_KEYCTL_CLEAR, _KEYCTL_READ, _KEYCTL_GET_PERSISTENT = 7, 11, 22
_USER_KEYRINGS = (-4, -5)  # KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING


def _clear_keyrings():
    """Empty the user, user-session and persistent keyrings: they belong to the user namespace, not to a
    process, so keys added by one run would reach the next one in a warm local namespace (Docker's seccomp
    profile refuses keyctl: nothing to clear there). True when both user keyrings read back empty."""
    nr = _KEYCTL_NR.get(os.uname().machine)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
    except Exception:  # noqa: BLE001 - without ctypes nothing can be checked: say unclean
        return False
    if nr is None:
        return False
    syscall = libc.syscall
    syscall.restype = ctypes.c_long
    persistent = syscall(nr, _KEYCTL_GET_PERSISTENT, ctypes.c_long(-1), ctypes.c_long(-4))
    if persistent > 0:
        syscall(nr, _KEYCTL_CLEAR, ctypes.c_long(persistent))
    for ring in _USER_KEYRINGS:
        syscall(nr, _KEYCTL_CLEAR, ctypes.c_long(ring))
    return all(syscall(nr, _KEYCTL_READ, ctypes.c_long(r), None, 0) <= 0 for r in _USER_KEYRINGS)


def _rmtree(path):
    import shutil

    os.chmod(path, 0o700)
    shutil.rmtree(path)


def _emit(frame, out=b"", err=b""):
    frame["stdout_len"], frame["stderr_len"] = len(out), len(err)
    sys.stdout.buffer.write(b"RRL1 " + json.dumps(frame).encode() + b"\n" + out + err)
    sys.stdout.buffer.flush()


def _serve_one(stdin, header, baseline):
    frame = {"exit_code": None, "wall_s": 0.0, "clean": False, "nonce": header["nonce"], "cell": ""}
    kill_all = header["kill_all"] and os.getuid() != 0  # never kill(-1) as root: that could reach the host
    # A session's runs share this sandbox: the first one starts clean, later ones continue its state; the
    # parent ends the session with an ordinary run, whose clean-up ends everything the session left.
    session = header.get("session", "")
    try:
        stdin_data = _read_exact(stdin, header["stdin_len"])
        if session != "continue":
            _FORKSERVER["end_child"]()  # an earlier session's interpreter
        if kill_all and session != "continue":
            _kill_all()
        if session != "continue":
            _wipe(header["scratch"])
        _write_files(header["workdir"], header["files"])
    except Exception as exc:  # noqa: BLE001 - set-up failed before the program ran: our failure, say what
        # ... unless this session's code ran here already: then it is what broke the set-up
        frame.update(stopped_by="exit" if session == "continue" else "sandbox_error")
        frame.update(detail=f"supervisor set-up: {exc!r}", cell="died" if session == "continue" else "")
        _emit(frame)
        return
    oom_before = _oom_kills()
    detail, outcome = "", ""
    started = time.monotonic()
    try:
        if header.get("repl"):
            stopped_by, code, out, err, outcome = _FORKSERVER["run"](header)
        else:
            stopped_by, code, out, err = _run(header, stdin_data)
    except OSError as exc:  # e.g. command not found: the program's problem, reported like a shell would
        stopped_by, code, out, err = "exit", 127, b"", str(exc).encode()
        detail = f"could not start the command: {exc}"
    wall = time.monotonic() - started
    if stopped_by == "exit" and oom_before >= 0 and _oom_kills() > oom_before:
        stopped_by = "memory"
    if session and stopped_by == "exit":  # kept for the session's next run, never offered to anyone else
        # nothing the call started outlives it: every process but the (frozen) interpreter is killed
        interpreter = _FORKSERVER["freeze"]()
        clean = _kill_all(interpreter) if kill_all else True
    else:
        _FORKSERVER["end_child"]()
        clean = _kill_all() if kill_all else True
        clean = _wipe(header["scratch"]) and clean
        clean = _clear_sysv_ipc() and clean
        clean = _clear_keyrings() and clean
    # after _kill_all: nothing of the run can change them now
    clean = _inherited_state() == baseline and _FORKSERVER["zygote_ok"]() and clean
    frame.update(exit_code=code, stopped_by=stopped_by, wall_s=wall, clean=clean, detail=detail, cell=outcome)
    _emit(frame, out, err)


def main():
    """Serve requests until stdin closes: one supervisor per warm Docker container (no ``docker exec`` per run)
    or warm local namespace (where it is PID 1: no other process of the namespace holds the trusted pipes)."""
    undumpable, baseline = _undumpable(), _inherited_state()  # before any untrusted code ran
    exec(globals()["_FORKSERVER_SOURCE"], _FORKSERVER)
    if undumpable:
        _FORKSERVER["start_zygote"](_inherited_state)  # before any request: its memory holds none
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        header = json.loads(line)
        if not undumpable:  # the program could take over our pipes to the trusted side: run nothing
            frame = {"exit_code": None, "wall_s": 0.0, "clean": False, "nonce": header["nonce"]}
            frame.update(stopped_by="sandbox_error", detail="supervisor: cannot make itself undumpable")
            _emit(frame)
            return
        _serve_one(stdin, header, baseline)


if __name__ == "__main__":
    main()
