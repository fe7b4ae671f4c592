#!/usr/bin/env bash
# Set up everything ferry needs on a fresh Debian 12 machine: apt packages and a pinned Python venv.
# Idempotent and quick on a second run (a stamp records what was installed).
#   scripts/setup.sh            runtime + tests (ZooKeeper, Java, debootstrap, the venv)
#   scripts/setup.sh --bench    also RabbitMQ and ActiveMQ (the paper's peers, for bench/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
APT_PACKAGES=(zookeeper default-jre-headless default-jdk-headless debootstrap procps iproute2 iptables util-linux kcat chromium chromium-driver prometheus
              postgresql libpostgresql-jdbc-java)
if [[ "${1:-}" == "--bench" ]]; then APT_PACKAGES+=(rabbitmq-server activemq); fi

need=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  echo "setup: apt-get install ${need[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # Debian starts these as services on install; ferry's benchmarks run their own loopback-only instances.
  for svc in rabbitmq-server activemq zookeeper prometheus postgresql; do $SUDO systemctl stop "$svc" >/dev/null 2>&1 || true; done
fi

STAMP=".venv/.ferry-stamp"
want="$(cat requirements/lock.txt pyproject.toml setup.py | sha256sum | cut -c1-16)"
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]]; then
  echo "setup: installing pinned Python packages (first time takes a few minutes: PySpark, Airflow)"
  .venv/bin/pip install -q --upgrade "pip==26.3" "setuptools==84.2.1" "wheel==0.48.0"
  .venv/bin/pip install -q -r requirements/lock.txt
  .venv/bin/pip install -q --no-deps -e .
  echo "$want" > "$STAMP"
fi
# ferry's native parts (setup.py declares them: Cython -> a .so beside each .pyx; quick when up to date).
# Without them ferry still works on the pure-Python twins, slower (`ferry version` says which parts run).
# FERRY_REQUIRE_NATIVE=1 (scripts/test.sh) makes a failed build fail the setup instead of warning.
mkdir -p build
if ! FERRY_REQUIRE_NATIVE=1 .venv/bin/python setup.py -q build_ext --inplace >build/native.log 2>&1; then
  if [[ "${FERRY_REQUIRE_NATIVE:-0}" == 1 ]]; then
    cat build/native.log >&2
    echo "setup: ferry's native parts did not build (FERRY_REQUIRE_NATIVE=1): failing" >&2
    exit 1
  fi
  echo "setup: WARNING: ferry's native parts did not build (build/native.log); the broker, the mirror" \
       "and ferry load use their slower pure-Python paths" >&2
fi
echo "setup: ready ($(.venv/bin/python --version), $(java -version 2>&1 | head -1))"
