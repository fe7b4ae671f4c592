#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run ferry's whole test suite: lint, unit and system tests with real
# ZooKeeper, brokers, Spark and Airflow, then the two-datacenter integration tests (testcontainers).
# Extra arguments go to pytest (e.g. `scripts/test.sh -k mirror`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Every native part must build and load: a .pyx that does not compile fails the setup, and a part that is
# missing fails its tests instead of skipping them (ferry.wire.native).
export FERRY_REQUIRE_NATIVE=1
scripts/setup.sh
export TESTCONTAINERS_RYUK_DISABLED=true
export PYSPARK_PYTHON="$ROOT/.venv/bin/python" PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
export PATH="$ROOT/.venv/bin:$PATH" SPARK_LOCAL_IP=127.0.0.1
# The container images (infra/images/build.sh: ~10 min from nothing) are built in the background while the
# tests that need no images run; the infra and integration tests then wait on build.sh's lock and reuse them.
# Low priority and half a core for the build containers, so that timing-sensitive tests are not starved.
# Only for the whole suite (no pytest arguments) on a machine whose Docker engine answers; FERRY_PREBUILD=0: off.
prebuild_pid=""
if [[ $# -eq 0 && "${FERRY_PREBUILD:-1}" != 0 ]] && docker info >/dev/null 2>&1; then
  mkdir -p infra/images/build
  FERRY_BUILD_CPUS=0.5 nice -n 19 ionice -c3 infra/images/build.sh >infra/images/build/prebuild.log 2>&1 &
  prebuild_pid=$!
  echo "== images: building in the background (infra/images/build/prebuild.log)"
fi
# (the trap must not fail under set -e: that would replace pytest's exit status with 1)
trap 'if [[ -n "$prebuild_pid" ]]; then kill "$prebuild_pid" 2>/dev/null || true; fi' EXIT
echo "== ruff"
ruff check .
# Two pytest workers (pytest-xdist), each taking whole test files (a file's module fixtures, such as the Ansible
# deployment, are set up once): in the first 11 minutes of a serial run (vmstat) ~44% of the CPU was idle,
# waiting on processes, containers and timeouts. FERRY_TEST_WORKERS=0 runs everything in this one process.
# Files are handed out in collection order, long files first (tests/conftest.py LONG_FILES), not xdist's
# most-tests-first order, which started the few-test files of minutes (Ansible, demos, Spark faults) last.
workers="${FERRY_TEST_WORKERS:-2}"
xdist=()
if [[ "$workers" != 0 ]]; then xdist=(-n "$workers" --dist loadfile --no-loadscope-reorder); fi
echo "== pytest (${workers} workers)"
set +e
pytest -q -rs --durations=15 "${xdist[@]}" "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then echo "test.sh: pytest collected no tests: failing" >&2; exit 1; fi
exit $rc
