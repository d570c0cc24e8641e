"""Runs INSIDE the sandbox (stdlib only): one forked process per test, per-test and total deadlines, results
serialised with a plain-data allow-list. It receives inputs only, never expected outputs; the trusted parent
decodes and compares. The codec below is also imported by the parent (``graders.code.values``).

Request (stdin): its length in bytes on one line, then that much JSON: {"mode": "stdio"|"call", "code": str,
"fn_name": str, "tests": [...], "per_test_s": float, "total_s": float, "output_caps": [int, ...],
"stop_on_failure": bool}; stdio tests are input strings, call tests are {"args": enc, "kwargs": enc};
``output_caps`` bounds each test's stdout (and result line) in bytes. Then one line: the trusted side's nonce
for this run. It is read only after every test has run (it waits in the pipe; no test process holds the pipe
or can open it, the harness being undumpable), and the response carries it: whatever a test's process
manages to print, it cannot be taken for the harness's reply.
Response (stdout, JSON): {"nonce": str, "results": [{"status": "ok"|"error"|"crash"|"timeout"|"output_limit"|"skipped",
"stdout": str, "value": enc, "mutated": [enc args, enc kwargs], "error": str, "exit_code": int, "time_s": float},
...]}; ``mutated`` is present when the call changed its arguments in place.
"""

import builtins
import collections
import contextlib
import functools
import json
import math
import os
import selectors
import signal
import sys
import time
import traceback

_type, _len, _isinstance, _repr, _str = type, len, isinstance, repr, str
MAX_DEPTH = 100
_ERR_CAP = 2000


class Unserialisable(TypeError):
    """The value has a type outside the allow-list (e.g. an arbitrary object with a custom ``__eq__``)."""


def encode(x, depth=0):
    """Plain data only. Exact types take the fast path; subclasses of the allowed types (``Counter``,
    ``OrderedDict``, ``defaultdict``, a ``namedtuple``, an ``IntEnum``, ``numpy.float64``) are encoded by the
    content they really store, read through the base type's own methods, so an overridden ``__eq__``,
    ``__iter__`` or ``__str__`` has no say. Anything else is refused."""
    if depth > MAX_DEPTH:
        raise Unserialisable("value nested too deeply")
    t = _type(x)
    if x is None or t is bool or t is str or t is int:
        return x
    if t is float:
        return x if math.isfinite(x) else {"float": _repr(x)}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"tuple": [encode(v, depth + 1) for v in x]}
    if t is dict:
        return {"dict": _pairs(dict.items(x), depth)}
    if t is set or t is frozenset:
        return {t.__name__: [encode(v, depth + 1) for v in x]}
    if t is bytes:
        return {"bytes": x.hex()}
    if t is complex:
        return {"complex": [encode(x.real, depth + 1), encode(x.imag, depth + 1)]}
    return _encode_subclass(x, t, depth)


def _pairs(items, depth):
    return [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in items]


def _encode_subclass(x, t, depth):
    if issubclass(t, int):
        return int.__index__(x)
    if issubclass(t, str):
        return str.__str__(x)
    if issubclass(t, float):
        return encode(float.__float__(x), depth)
    if issubclass(t, complex):
        return encode(complex(complex.real.__get__(x), complex.imag.__get__(x)), depth)
    if issubclass(t, bytes):
        return {"bytes": bytes.hex(x)}
    if issubclass(t, list):
        return [encode(v, depth + 1) for v in list.__iter__(x)]
    if issubclass(t, frozenset):
        return {"frozenset": [encode(v, depth + 1) for v in frozenset.__iter__(x)]}
    if issubclass(t, set):
        return {"set": [encode(v, depth + 1) for v in set.__iter__(x)]}
    if issubclass(t, tuple):
        items = [encode(tuple.__getitem__(x, i), depth + 1) for i in range(tuple.__len__(x))]
        fields = _namedtuple_fields(t, len(items))
        return {"namedtuple": [t.__name__, fields, items]} if fields else {"tuple": items}
    if issubclass(t, dict):
        return _encode_mapping(x, t, depth)
    raise Unserialisable("type " + t.__name__ + " is not an allowed result type")


def _namedtuple_fields(t, n):
    fields = getattr(t, "_fields", None)
    if (
        isinstance(fields, tuple)
        and _type(fields) is tuple
        and _len(fields) == n
        and all(_type(f) is str for f in fields)
    ):
        return list(fields)
    return None


def _encode_mapping(x, t, depth):
    if issubclass(t, collections.OrderedDict):
        return {"odict": _pairs(collections.OrderedDict.items(x), depth)}
    pairs = _pairs(dict.items(x), depth)
    if issubclass(t, collections.Counter):
        return {"counter": pairs}
    if issubclass(t, collections.defaultdict):
        factory = vars(collections.defaultdict)["default_factory"].__get__(x)  # the stored one, not a shadow
        name = next((n for n, f in _FACTORIES.items() if f is factory), None)
        return {"defaultdict": [name, pairs]} if name is not None or factory is None else {"dict": pairs}
    return {"dict": pairs}


_FACTORIES = {
    "int": int,
    "float": float,
    "str": str,
    "list": list,
    "dict": dict,
    "set": set,
    "tuple": tuple,
    "bool": bool,
    "frozenset": frozenset,
}
_TAGS = {
    "tuple",
    "dict",
    "set",
    "frozenset",
    "bytes",
    "complex",
    "float",
    "odict",
    "counter",
    "defaultdict",
    "namedtuple",
}
MAX_SAME_HASH = 8  # distinct values sharing one hash in a decoded set/dict: more is hash flooding, not data


def spread_hashes(values, buckets=None, limit=MAX_SAME_HASH):
    """Raise ValueError when more than ``limit`` distinct values share one hash: building a set or dict of
    them would cost O(n^2) (ints, floats and tuples hash predictably). ``buckets`` may be shared across calls."""
    buckets = {} if buckets is None else buckets
    for v in values:
        same = buckets.setdefault(hash(v), [])  # keys are hash values: distinct keys hash apart
        if not any(v is w or v == w for w in same):  # as a set compares: identity first
            same.append(v)
            if _len(same) > limit:
                raise ValueError("too many distinct values share one hash (a hash-flooding value)")
    return buckets


def decode(x, depth=0):
    """Inverse of ``encode``; strict: anything malformed (or hash-flooded) raises ValueError."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    t = _type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if t is list:
        return [decode(v, depth + 1) for v in x]
    if t is not dict or _len(x) != 1:
        raise ValueError("malformed encoded value")
    ((tag, body),) = x.items()
    if tag not in _TAGS:
        raise ValueError("unknown tag " + _repr(tag))
    if tag == "float":
        if body not in ("nan", "inf", "-inf"):
            raise ValueError("malformed float")
        return float(body)
    if tag == "bytes":
        if _type(body) is not str:
            raise ValueError("malformed bytes")
        return bytes.fromhex(body)
    if _type(body) is not list:
        raise ValueError("malformed " + tag)
    if tag == "tuple":
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "complex":
        if _len(body) != 2:
            raise ValueError("malformed complex")
        return complex(decode(body[0], depth + 1), decode(body[1], depth + 1))
    if tag == "namedtuple":
        return _decode_namedtuple(body, depth)
    if tag == "defaultdict":
        if _len(body) != 2 or not (body[0] is None or body[0] in _FACTORIES):
            raise ValueError("malformed defaultdict")
        return collections.defaultdict(_FACTORIES.get(body[0]), _decode_pairs(body[1], depth))
    if tag in ("dict", "odict", "counter"):
        pairs = _decode_pairs(body, depth)
        if tag == "odict":
            return collections.OrderedDict(pairs)
        if tag == "counter":
            counter: collections.Counter = collections.Counter()
            dict.update(counter, pairs)  # the counts as sent (Counter.update would add them up)
            return counter
        return dict(pairs)
    items = [decode(v, depth + 1) for v in body]
    spread_hashes(items)
    return set(items) if tag == "set" else frozenset(items)


def _decode_pairs(body, depth):
    if _type(body) is not list:
        raise ValueError("malformed dict")
    pairs = []
    for pair in body:
        if _type(pair) is not list or _len(pair) != 2:
            raise ValueError("malformed dict entry")
        pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
    spread_hashes(k for k, _ in pairs)
    return pairs


def _decode_namedtuple(body, depth):
    if (
        _len(body) != 3
        or _type(body[0]) is not str
        or _type(body[1]) is not list
        or _type(body[2]) is not list
    ):
        raise ValueError("malformed namedtuple")
    fields = tuple(body[1])
    if _len(fields) != _len(body[2]) or not all(_type(f) is str for f in fields):
        raise ValueError("malformed namedtuple")
    cls = _namedtuple_class(body[0], fields)
    return cls(*[decode(v, depth + 1) for v in body[2]])


@functools.lru_cache(maxsize=256)
def _namedtuple_class(name, fields):
    return collections.namedtuple(name, fields)  # validates the names: a bad one raises ValueError


def _undumpable():
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE=0: /proc/<harness>/fd, mem become root-only


def _fresh_stdio():
    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        stream = open(fd, mode, closefd=False)  # noqa: SIM115 - lives as long as the process
        setattr(sys, name, stream)
        setattr(sys, "__" + name + "__", stream)


class _Quitter:
    """``exit()``/``quit()`` as the site module defines them (the harness runs with -S to start faster)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Use " + self.name + "() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


def _child(req, compiled, test, fds):
    """In the forked child: wire fds, run the submission, report, and leave with os._exit (no atexit)."""
    in_fd = os.memfd_create("stdin")
    data = (test if req["mode"] == "stdio" else "").encode("utf-8", "surrogatepass")
    os.write(in_fd, data)
    os.lseek(in_fd, 0, 0)
    os.dup2(in_fd, 0)
    os.dup2(fds["out"], 1)
    os.dup2(fds["err"], 2)
    os.dup2(fds["res"], 3)
    os.closerange(4, 4096)
    _fresh_stdio()
    if req["mode"] == "stdio":
        code = 0
        try:
            exec(compiled, {"__name__": "__main__", "__builtins__": builtins})
        except SystemExit as exc:
            status = exc.code
            code = (
                status if isinstance(status, int) and _type(status) is int else (0 if status is None else 1)
            )
        except BaseException:  # noqa: BLE001 - the submission's error is the test's result
            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr, sys.__stdout__):
            with contextlib.suppress(BaseException):
                stream.flush()  # type: ignore[union-attr]
        os._exit(code & 0xFF)
    try:
        namespace = {"__name__": "solution", "__builtins__": builtins}
        exec(compiled, namespace)
        fn = _resolve(namespace, req["fn_name"])
        args, kwargs = decode(test["args"]), decode(test["kwargs"])
        reply = {"value": encode(fn(*args, **kwargs))}
        after = [encode(args), encode(kwargs)]
        if after != [test["args"], test["kwargs"]]:  # it changed its arguments in place: the check may look
            reply["mutated"] = after
        line = json.dumps(reply)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and friends included: a failed call, nothing more
        line = json.dumps({"error": _type(exc).__name__, "message": _str(exc)[:500]})
    os.write(3, line.encode() + b"\n")
    os._exit(0)


def _resolve(namespace, name):
    sol = namespace.get("Solution")
    if _isinstance(sol, type) and hasattr(sol, name):
        return getattr(sol(), name)
    fn = namespace.get(name)
    if not callable(fn):
        raise NameError("function " + name + " is not defined by the submission")
    return fn


def _collect(pid, pipes, deadline, cap):
    """Read the child's pipes until EOF, its deadline or the cap; then kill its process group."""
    bufs = {fd: bytearray() for fd in pipes.values()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    status, done, wstatus = None, 0, 0
    while sel.get_map() and status is None:
        now = time.monotonic()
        if not done:
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            if done:  # exited while a grandchild holds its pipes: take what is there, stop waiting soon
                deadline = min(deadline, now + 0.05)
        remaining = deadline - now
        if remaining <= 0:
            if not done:
                status = "timeout"
            break
        for key, _ in sel.select(min(remaining, 0.02)):
            chunk = os.read(key.fd, 65536)
            if not chunk:
                sel.unregister(key.fd)
                continue
            bufs[key.fd] += chunk
            if _len(bufs[key.fd]) > cap:
                status = "output_limit"
    sel.close()
    if status is None and not done:
        while True:
            done, wstatus = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        if not done:
            status = "timeout"
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if not done:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)  # it may have left its process group
        with contextlib.suppress(ChildProcessError):
            _, wstatus = os.waitpid(pid, 0)
    for fd in bufs:
        os.close(fd)
    out = {name: bytes(bufs[fd]) for name, fd in pipes.items()}
    return status, os.waitstatus_to_exitcode(wstatus), out


def _run_test(req, compiled, test, deadline, cap):
    started = time.monotonic()
    pipes, child_fds = {}, {}
    for name in ("out", "err", "res"):
        r, w = os.pipe()
        pipes[name], child_fds[name] = r, w
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            for fd in pipes.values():
                os.close(fd)
            _child(req, compiled, test, child_fds)
        finally:
            os._exit(70)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    for fd in child_fds.values():
        os.close(fd)
    status, exit_code, out = _collect(pid, pipes, deadline, cap)
    result = {
        "time_s": time.monotonic() - started,
        "exit_code": exit_code,
        "error": out["err"][-_ERR_CAP:].decode("utf-8", "replace"),
    }
    if status is not None:
        result["status"] = status
        return result
    if req["mode"] == "stdio":
        result["status"] = "ok" if exit_code == 0 else "crash"
        result["stdout"] = out["out"].decode("utf-8", "replace")
        return result
    lines = out["res"].splitlines()
    if _len(lines) != 1:
        result["status"] = "crash"
        return result
    try:
        reply = json.loads(lines[0])
        if "value" in reply:
            result.update(status="ok", value=reply["value"])
            if "mutated" in reply:
                result["mutated"] = reply["mutated"]
        else:
            exc_type, message = _str(reply["error"]), _str(reply["message"])
            result.update(status="error", error=exc_type + ": " + message, exc_type=exc_type)
    except Exception:  # noqa: BLE001 - the child wrote garbage on the result pipe: its failure
        result["status"] = "crash"
    return result


def _read_exact(n):
    data = bytearray()
    while _len(data) < n:
        chunk = os.read(0, n - _len(data))
        if not chunk:
            raise EOFError("stdin ended early")
        data += chunk
    return bytes(data)


def _read_line(limit):
    """One line from fd 0, byte by byte: nothing after it is read (a buffered reader would read ahead)."""
    line = bytearray()
    while not line.endswith(b"\n") and _len(line) <= limit:
        c = os.read(0, 1)
        if not c:
            break
        line += c
    return bytes(line).strip()


def main():
    _undumpable()
    builtins.exit, builtins.quit = _Quitter("exit"), _Quitter("quit")  # type: ignore[assignment]
    req = json.loads(_read_exact(int(_read_line(20))))
    total_deadline = time.monotonic() + req["total_s"]
    results = []
    try:
        compiled = compile(req["code"], "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        err = "SyntaxError: " + _str(exc)
        results = [{"status": "crash", "error": err, "time_s": 0.0} for _ in req["tests"]]
        compiled = None
    if compiled is not None:
        for i, test in enumerate(req["tests"]):
            now = time.monotonic()
            if now >= total_deadline:
                results.append({"status": "skipped", "error": "total time limit reached", "time_s": 0.0})
                continue
            deadline = min(now + req["per_test_s"], total_deadline)
            results.append(_run_test(req, compiled, test, deadline, req["output_caps"][i]))
            if req["stop_on_failure"] and results[-1]["status"] != "ok":
                stop = "skipped after test " + _str(_len(results) - 1) + " failed"
                results += [
                    {"status": "skipped", "error": stop, "time_s": 0.0} for _ in req["tests"][_len(results) :]
                ]
                break
    nonce = _read_line(128).decode("ascii", "replace")  # only now: every test process is gone
    sys.stdout.write(json.dumps({"nonce": nonce, "results": results}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
