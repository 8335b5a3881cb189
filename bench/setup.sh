#!/usr/bin/env bash
# Install what the benchmarks need beyond the test bootstrap, idempotently: Debian's nginx (the
# webhook receiver), redis-server (Celery's broker) and rabbitmq-server, no services started;
# the Python peers (the `bench` extra: Celery, APScheduler 3) into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
apt_pkgs=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apt_pkgs+=(nginx)
command -v redis-server >/dev/null 2>&1 || apt_pkgs+=(redis-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || apt_pkgs+=(rabbitmq-server)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    # the benchmark starts its own servers on loopback: keep the packages' services off
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
    $sudo rm -f /usr/sbin/policy-rc.d
fi
[ -x .venv/bin/python ] || scripts/bootstrap.sh --dev
.venv/bin/python -m pip install -q -e ".[dev,bench]"
