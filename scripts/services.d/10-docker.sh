#!/usr/bin/env bash
# System programs the sandboxes and tests need: Docker (+ debootstrap to build the image offline), bubblewrap (the
# local sandbox) and gcc (30-lean.sh links the Lean launcher). Install them when missing, start dockerd when it
# does not answer. tests/system_programs.py stops the test session with one line when one of them is missing.
# Idempotent; prints what it does. Needs root to install/start (CI runs as root).
set -euo pipefail

missing=0
for program in dockerd debootstrap bwrap gcc; do
    command -v "$program" >/dev/null 2>&1 || missing=1
done
if [[ $missing -eq 1 ]]; then
    echo "[services] installing docker.io + debootstrap + bubblewrap + gcc (apt-get)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap bubblewrap gcc libc6-dev
fi

if docker info >/dev/null 2>&1; then
    echo "[services] docker daemon: already running"
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "[services] docker daemon not running and we are not root: start it (sudo dockerd &) and rerun" >&2
    exit 1
fi

log=/var/log/rrl-dockerd.log

# Wait up to $1 seconds for the daemon to answer; fail early when the dockerd process is gone.
wait_for_docker() {
    local pid=$1 seconds=$2
    for _ in $(seq 1 "$seconds"); do
        docker info >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 1
    done
    return 1
}

# A daemon that died without cleaning up (or a machine image saved while one ran) leaves pid files behind.
# When that pid has since been reused, dockerd believes its containerd "is still running" and times out
# waiting for a socket that never appears (seen in CI). With no dockerd/containerd alive, they are stale.
clear_stale_state() {
    pkill -x dockerd 2>/dev/null || true
    pkill -f "containerd --config /var/run/docker/containerd/containerd.toml" 2>/dev/null || true
    sleep 1
    rm -f /var/run/docker.pid /var/run/docker/containerd/containerd.pid /var/run/docker/containerd/containerd.sock
}

for attempt in 1 2 3; do
    clear_stale_state
    echo "[services] starting dockerd in the background (attempt $attempt, log: $log)"
    # In a session of its own with no descriptor of ours but the log: a daemon that inherited one (a CI
    # runner's pipe, a caller's flock) would hold it for as long as it runs.
    (
        exec </dev/null >"$log" 2>&1
        for fd in $(ls /proc/$BASHPID/fd); do [ "$fd" -gt 2 ] && eval "exec $fd>&-"; done
        exec setsid dockerd
    ) &
    pid=$!
    if wait_for_docker "$pid" 90; then
        echo "[services] docker daemon: up"
        exit 0
    fi
    echo "[services] dockerd did not come up (attempt $attempt); last log lines:" >&2
    grep -v 'module=grpc' "$log" | tail -5 >&2 || true
done
echo "[services] dockerd failed to start 3 times; full log: $log" >&2
exit 1
