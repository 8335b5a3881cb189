#!/usr/bin/env bash
# The second command: install the test tools and servers, then run the whole suite against
# real parts (SQLite, PostgreSQL, a Kafka-protocol broker, RabbitMQ, HTTP, Spark).
# Extra arguments go to pytest (e.g. ./test.sh -m "not slow" while iterating).
# TOCSIN_TEST_WORKERS=N runs it on N pytest-xdist workers (default 0: this one process; two
# halve the time on two cores, but the ordering e2e test has timed out so on a loaded machine,
# see docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --dev
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/python -m pytest -n "${TOCSIN_TEST_WORKERS:-0}" "$@"
