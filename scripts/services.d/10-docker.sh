#!/usr/bin/env bash
# Docker engine for the code sandbox: install it when missing, start dockerd when it does not answer.
# Idempotent; prints what it does. Needs root to install/start (CI runs as root).
set -euo pipefail

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    echo "[services] installing docker.io + debootstrap (apt-get)"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap
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
echo "[services] starting dockerd in the background (log: $log)"
nohup dockerd >"$log" 2>&1 &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        echo "[services] docker daemon: up"
        exit 0
    fi
    sleep 1
done
echo "[services] dockerd did not come up within 60 s; last log lines:" >&2
tail -20 "$log" >&2
exit 1
