#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run ferry's whole test suite: lint, unit and system tests with real
# ZooKeeper, brokers, Spark and Airflow, then the two-datacenter integration tests (testcontainers).
# Extra arguments go to pytest (e.g. `scripts/test.sh -k mirror`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/setup.sh
export TESTCONTAINERS_RYUK_DISABLED=true
export PYSPARK_PYTHON="$ROOT/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH" SPARK_LOCAL_IP=127.0.0.1
echo "== ruff"
ruff check .
echo "== pytest"
set +e
pytest -q -rs --durations=15 "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
