"""Both backends honour the same contract: files, stdin, caps, limits, mounts, cleanup between runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandboxes import Limits, Mount, RunRequest, RunResult, Sandbox

BACKENDS = [pytest.param("docker_sandbox", marks=pytest.mark.docker), "local_sandbox"]


@pytest.fixture(params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Sandbox:
    return request.getfixturevalue(request.param)


def py(code: str, **kw: object) -> RunRequest:
    return RunRequest(["python3", "main.py"], files={"main.py": code}, **kw)  # type: ignore[arg-type]


def test_files_stdin_and_exit_code(sb: Sandbox) -> None:
    r = sb.run(
        RunRequest(
            ["python3", "main.py"],
            files={
                "main.py": "import sys\nprint(open('sub/in.txt').read() + sys.stdin.read())\nsys.exit(3)",
                "sub/in.txt": "a",
            },
            stdin=b"b",
        )
    )
    assert (r.stdout, r.exit_code, r.stopped_by) == (b"ab\n", 3, "exit")


def test_runs_unprivileged_without_network(sb: Sandbox) -> None:
    r = sb.run(
        py(
            "import os, socket\nprint(os.getuid())\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=2)\n    print('connected')\n"
            "except OSError as e:\n    print('blocked')\n"
            "try:\n    socket.getaddrinfo('example.com', 80)\n    print('resolved')\n"
            "except OSError:\n    print('no-dns')\n"
        )
    )
    assert r.stdout.split() == [b"65534", b"blocked", b"no-dns"], r


def test_wall_clock_timeout(sb: Sandbox) -> None:
    r = sb.run(py("while True: pass", limits=Limits(wall_s=1)))
    # stopped by its own 1 s limit, not the 10 s default: the bound is the default, so load may stretch the kill
    assert r.stopped_by == "timeout" and 0.9 < r.wall_s < Limits().wall_s, r


def test_memory_limit(sb: Sandbox) -> None:
    r = sb.run(py("x = bytearray(1 << 30)\nprint('allocated')", limits=Limits(memory_mb=128)))
    assert r.stopped_by == "memory" and b"allocated" not in r.stdout, r


def test_output_is_capped(sb: Sandbox) -> None:
    r = sb.run(
        py("import sys\nwhile True: sys.stdout.write('x' * 65536)", limits=Limits(output_bytes=100_000))
    )
    assert r.stopped_by == "output_limit" and len(r.stdout) <= 100_000


def test_disk_is_bounded(sb: Sandbox) -> None:
    r = sb.run(
        py(
            "f = open('big', 'wb')\nfor _ in range(100): f.write(b'x' * (1 << 20))\nf.close()\nprint('wrote')",
            limits=Limits(disk_mb=8),
        )
    )
    assert b"wrote" not in r.stdout and r.exit_code != 0


def test_read_only_root_and_mount(sb: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "tool.txt").write_text("toolchain")
    tmp_path.chmod(0o755)  # the sandbox user must be able to read it, as a real toolchain dir would allow
    r = sb.run(
        py(
            "print(open('/opt/tool/tool.txt').read())\n"
            "for p in ['/opt/tool/new', '/usr/x', '/etc/x']:\n"
            "    try:\n        open(p, 'w')\n        print('wrote', p)\n    except OSError:\n        print('ro')\n",
            mounts=(Mount(str(tmp_path), "/opt/tool"),),
        )
    )
    assert r.stdout.split() == [b"toolchain", b"ro", b"ro", b"ro"], r


def test_nothing_survives_between_runs(sb: Sandbox) -> None:
    first = sb.run(
        py(
            "import os, subprocess\nopen('/tmp/left', 'w').write('x')\nopen('left', 'w').write('x')\n"
            "subprocess.Popen(['sleep', '60'], start_new_session=True)\nprint('spawned')",
            limits=Limits(wall_s=60),
        )
    )
    assert (first.stdout, first.stopped_by, first.exit_code) == (b"spawned\n", "exit", 0)
    # a run that waited for the child holding its pipes would take its 60 s; ~0.3 s without: a hang guard's margin
    assert first.wall_s < 30, (
        "a background child holding the pipes must not stretch the run to the wall clock"
    )
    r = sb.run(
        py(
            "import os\nprint(sorted(os.listdir('.')), os.listdir('/tmp'))\n"
            "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and os.stat('/proc/' + p).st_uid == os.getuid()))"
        )
    )
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "['main.py'] []"
    assert lines[1] == "3", (
        "only the supervisor, its fork server's zygote and this program may run as the sandbox user"
    )


def test_sandbox_error_is_not_program_error(sb: Sandbox) -> None:
    r: RunResult = sb.run(RunRequest(["python3", "x.py"], files={"../escape.py": "x"}))
    assert r.stopped_by == "sandbox_error"
    missing = sb.run(RunRequest(["no-such-binary"]))
    assert missing.stopped_by == "exit" and missing.exit_code == 127


def test_text_file_with_a_lone_surrogate_is_written_not_raised(sb: Sandbox) -> None:
    """A response's lone surrogate (issue #15) reaches the program as the bytes Python would write with
    ``surrogatepass``; encoding it used to raise UnicodeEncodeError out of ``run``."""
    r = sb.run(RunRequest(["python3", "-c", "print(open('f.txt', 'rb').read())"], files={"f.txt": "a\ud83d"}))
    assert (r.stdout, r.stopped_by) == (b"b'a\\xed\\xa0\\xbd'\n", "exit"), r
