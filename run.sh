#!/usr/bin/env bash
# The first command: install what is missing, then run Tocsin on the embedded default
# (SQLite + Spark local mode). Extra arguments go to `tocsin up`.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/bootstrap.sh
export SPARK_LOCAL_IP=127.0.0.1
# The embedded default's destination policy: webhooks may reach receivers on this machine.
# A server deployment leaves this unset, so loopback and private addresses are refused
# (docs/security.md); set it to '' here to refuse them too.
export TOCSIN_WEBHOOK_ALLOW="${TOCSIN_WEBHOOK_ALLOW-127.0.0.0/8,::1}"
exec .venv/bin/tocsin up "$@"
