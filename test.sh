#!/usr/bin/env bash
# The second command: install the test tools and servers, then run the whole suite against
# real parts (SQLite, PostgreSQL, a Kafka-protocol broker, RabbitMQ, an SQS-protocol server,
# Redis, NATS, HTTP, Spark).
# Extra arguments go to pytest (e.g. ./test.sh -m "not slow" while iterating).
# It runs on TOCSIN_TEST_WORKERS pytest-xdist workers (default 2: the suite mostly waits on the
# servers and processes it starts, so two halve it even on two cores; 0 runs it in this one
# process, see docs/testing.md). An idle worker takes tests queued for the other (worksteal).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --dev
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/python -m pytest -n "${TOCSIN_TEST_WORKERS:-2}" --dist worksteal "$@"
