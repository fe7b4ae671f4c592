#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run `ferry demo`: the whole two-datacenter pipeline on this machine.
# Extra arguments go to `ferry demo` (see `ferry demo --help`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
export PYSPARK_PYTHON="$ROOT/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH" SPARK_LOCAL_IP=127.0.0.1
exec ferry demo "$@"
