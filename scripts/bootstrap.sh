#!/usr/bin/env bash
# Install what Tocsin needs on this machine, idempotently: Java 17 (for Spark) from apt when
# missing, a virtualenv in .venv with Tocsin and its dependencies. With --dev, also the test
# tools and the real servers the test suite starts (PostgreSQL, RabbitMQ, Redis, NATS).
set -euo pipefail
cd "$(dirname "$0")/.."

extras="all"
apt_pkgs=()
command -v java >/dev/null 2>&1 || apt_pkgs+=(openjdk-17-jre-headless)
if [ "${1:-}" = "--dev" ]; then
    extras="dev"
    [ -x /usr/lib/postgresql/15/bin/initdb ] || command -v initdb >/dev/null 2>&1 || apt_pkgs+=(postgresql)
    command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || apt_pkgs+=(rabbitmq-server)
    # the Redis Streams and NATS channels' tests (tests/support/servers.py starts them)
    command -v redis-server >/dev/null 2>&1 || apt_pkgs+=(redis-server)
    command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_pkgs+=(nats-server)
    # the benchmarks' webhook receiver (bench/webhook_clients.py)
    command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apt_pkgs+=(nginx)
    # headless Chromium: the dashboard tests (tests/api/ui/test_browser.py) and the report test
    # (tests/pipelines/test_report.py)
    command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium chromium-driver)
fi
apt_install() {
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "bootstrap: apt-get install ${apt_pkgs[*]}" >&2
    $sudo apt-get update -qq
    # Services are started by Tocsin's own scripts and fixtures, not by the package.
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
    $sudo rm -f /usr/sbin/policy-rc.d
}

# The Debian packages and the Python ones install side by side (neither needs the other).
apt_pid=""
if [ ${#apt_pkgs[@]} -gt 0 ]; then
    apt_install &
    apt_pid=$!
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
stamp=".venv/.tocsin-$extras-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -e "$stamp" ]; then
    echo "bootstrap: installing Tocsin[$extras] into .venv" >&2
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[$extras]"
    touch "$stamp"
fi
# The test kit's example plug-in channel (kind example_lines, tests/plugins): its entry point
# must be installed for the plug-in tests to find it.
if [ "$extras" = "dev" ] && ! .venv/bin/python -c 'import tocsin_example_channel' 2>/dev/null; then
    .venv/bin/python -m pip install -q --no-deps -e tests/plugins/tocsin_example_channel
fi
# Tocsin's own modules compiled ahead (pip compiles the installed packages): where
# PYTHONDONTWRITEBYTECODE is set, every process, each Spark Python worker among them, would
# otherwise compile them anew.
.venv/bin/python -m compileall -q src >/dev/null
if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
    echo "bootstrap: apt-get install ${apt_pkgs[*]} failed" >&2
    exit 1
fi
# The Spark driver's classes archived once (tocsin.dispatcher.cds): every later JVM starts in about
# half the CPU. Not fatal: without it Spark starts as before.
if ! .venv/bin/python -c 'import sys; from tocsin.spark.cds import archive_path; sys.exit(not archive_path().is_file())'; then
    SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}" .venv/bin/python -m tocsin.dispatcher.cds \
        || echo "bootstrap: no Spark class archive (Spark starts without it)" >&2
fi
