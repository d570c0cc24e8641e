"""Running one benchmarked system on the GPU machine: its own process group with timestamped output, the
whole device's memory while it runs, and an empty GPU before the next one starts."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path


class GpuMemory:
    """Whole-device memory (nvidia-smi, every 0.5 s) while a system runs: verl's vLLM server lives in another
    process than its trainer, so no single torch allocator sees the total."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> GpuMemory:
        if shutil.which("nvidia-smi") is None:  # a CPU machine (tests of this module): no samples
            return self
        self._proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.strip().isdigit():
                self.samples.append(int(line.strip()))

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=10)

    def peak_gib(self) -> float | None:
        return round(max(self.samples) / 1024, 1) if self.samples else None


def gpu_state() -> tuple[list[int], int]:
    """(pids of processes on the GPU, MiB in use)."""
    if shutil.which("nvidia-smi") is None:
        return [], 0
    apps = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    used = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return [int(p) for p in apps.split() if p.isdigit()], int(used) if used.isdigit() else 0


def free_gpu(wait_s: float = 30.0) -> list[int]:
    """Wait for the GPU to empty after a run; end, by pid, what the run left on it (Ray actors that outlive a
    killed driver). Returns the pids it had to end."""
    deadline = time.time() + wait_s
    pids, used = gpu_state()
    while (pids or used > 2048) and time.time() < deadline:
        time.sleep(1)
        pids, used = gpu_state()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if pids:
        time.sleep(3)
    return pids


def run_logged(cmd: list[str], env: dict[str, str], log: Path, timeout: float) -> tuple[int | None, float]:
    """Run ``cmd`` in its own process group, each output line into ``log`` prefixed with the seconds since start;
    on timeout end the whole group. Returns (rc or None on timeout, wall seconds)."""
    started = time.time()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
        errors="replace",
    )

    log.parent.mkdir(parents=True, exist_ok=True)
    fh = log.open("w")

    def copy() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            fh.write(f"[{time.time() - started:7.1f}] {line}")
            fh.flush()

    reader = threading.Thread(target=copy, daemon=True)
    reader.start()
    try:
        rc: int | None = proc.wait(timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    reader.join(timeout=10)  # a Ray worker that outlived the group can hold the pipe open
    fh.close()
    return rc, round(time.time() - started, 1)
