#!/usr/bin/env bash
# The second command: install the test tools and servers, then run the whole suite against
# real parts (SQLite, PostgreSQL, a Kafka-protocol broker, RabbitMQ, HTTP, Spark).
# Extra arguments go to pytest (e.g. ./test.sh -m "not slow" while iterating; -n 0 runs in
# this one process). The suite runs on TOCSIN_TEST_WORKERS pytest-xdist workers (default: one
# per core, between 2 and 4): most of its time is spent waiting on the servers and `tocsin`
# processes it starts, so two workers halve it even on two cores.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --dev
export SPARK_LOCAL_IP=127.0.0.1
cores=$(nproc 2>/dev/null || echo 2)
workers=${TOCSIN_TEST_WORKERS:-$(( cores < 2 ? 2 : (cores > 4 ? 4 : cores) ))}
exec .venv/bin/python -m pytest -n "$workers" "$@"
