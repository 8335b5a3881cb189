#!/usr/bin/env bash
# The first command: install what is missing, then run Tocsin on the embedded default
# (SQLite + Spark local mode). Extra arguments go to `tocsin up`.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/tocsin up "$@"
