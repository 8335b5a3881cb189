#!/usr/bin/env bash
# The second command: install the test tools and servers, then run the whole suite against
# real parts (SQLite, PostgreSQL, a Kafka-protocol broker, RabbitMQ, HTTP, Spark).
# Extra arguments go to pytest (e.g. ./test.sh -m "not slow" while iterating).
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh --dev
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/python -m pytest "$@"
