#!/usr/bin/env bash
# Build ferry's container images locally: nothing can be pulled here, so everything starts from a
# Debian 12 rootfs made with debootstrap from the apt mirror this machine already uses.
#
#   infra/images/build.sh [--force] [TARGET...]   TARGET: debian base ferry warehouse loader wheels (default: all images)
#
#   ferry-debian:12-<h>        debootstrap --variant=minbase bookworm, `docker import`ed
#   ferry-base:<h>             + python3/venv, Java, Debian's ZooKeeper, systemd (PID 1 for Ansible hosts)
#   ferry:<h>                  + /opt/ferry/venv with ferry and its runtime deps (brokers, ZooKeeper, mirror)
#   ferry-warehouse-base:<h>   ferry-base + PySpark, pyarrow, pandas, Airflow in /opt/ferry/venv (lock pins)
#   ferry-loader:<h>           ferry-warehouse-base + ferry (the loader and Airflow hosts)
#   wheels                     (no image) build/wheelhouse/ and build/wheelhouse.tar: ferry's wheel, its
#                              pinned runtime deps and requirements.txt, for the Ansible roles
#
# <h> is a hash of everything an image is made from (its parent's tag, its Dockerfile, package lists, ferry's
# sources), also stored as the label org.ferry.content-hash. An image whose tag exists is reused, so a
# second run takes about a second; each image is also tagged :latest. Python wheels are built on this
# machine (pip, PyPI) and copied in: no build step inside a container needs PyPI. Timings are printed.
# infra/images/build/images.env records the tags for tests (FERRY_IMAGE=..., ...).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/infra/images"
BUILD="${FERRY_IMAGES_BUILD_DIR:-$HERE/build}"
SUITE=bookworm
# What the minbase rootfs gets beyond debootstrap's own set: nothing; Dockerfile.base installs the rest.
DEBIAN_INCLUDE=""
FORCE=0
TARGETS=()
for a in "$@"; do
  case "$a" in
    --force) FORCE=1 ;;
    debian|base|ferry|warehouse|loader|wheels) TARGETS+=("$a") ;;
    -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument '$a' (see --help)" >&2; exit 2 ;;
  esac
done
((${#TARGETS[@]})) || TARGETS=(debian base ferry warehouse loader wheels)
want() { local t; for t in "${TARGETS[@]}"; do [[ "$t" == "$1" ]] && return 0; done; return 1; }
# Parents are built when a child is wanted.
want loader && TARGETS+=(warehouse ferry)
want warehouse || want ferry && TARGETS+=(base)
want base && TARGETS+=(debian)

export DOCKER_BUILDKIT=0  # the engine here has no buildx; the classic builder is enough
mkdir -p "$BUILD"
exec 9>"$BUILD/.lock"
flock -w 1800 9 || { echo "build.sh: another build holds $BUILD/.lock" >&2; exit 1; }

T0=$(date +%s.%N)
stage_t=$T0
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}'; }
say() { printf '[build.sh %6ss] %s\n' "$(since "$T0")" "$*"; stage_t=$(date +%s.%N); }

timing() { printf '[build.sh] took %6ss  %s\n' "$(since "$stage_t")" "$1"; stage_t=$(date +%s.%N); }
hash_of() { sha256sum | cut -c1-12; }
have_image() { [[ $FORCE -eq 0 ]] && docker image inspect "$1" >/dev/null 2>&1; }
pip_host() {
  if [[ -x "$ROOT/.venv/bin/pip" ]]; then "$ROOT/.venv/bin/pip" "$@"; else python3 -m pip "$@"; fi
}
# Drop older builds of one repository (the content hash changed); images still used by a container stay.
prune_old() {
  local repo="$1" keep="$2" tag
  for tag in $(docker images --format '{{.Tag}}' "$repo"); do
    [[ "$tag" == "$keep" || "$tag" == latest ]] && continue
    docker rmi "$repo:$tag" >/dev/null 2>&1 || true
  done
}
# FERRY_BUILD_CPUS=0.5 caps each build container's CPU (scripts/test.sh builds in the background while tests
# run, and must not starve them); unset: no cap.
CPU_LIMIT=()
if [[ -n "${FERRY_BUILD_CPUS:-}" ]]; then
  CPU_LIMIT=(--cpu-period 100000 --cpu-quota "$(awk -v c="$FERRY_BUILD_CPUS" 'BEGIN{printf "%d", c*100000}')")
fi
docker_build() {  # docker_build TAG HASH DOCKERFILE CONTEXT [--build-arg ...]
  local tag="$1" h="$2" file="$3" ctx="$4"; shift 4
  docker build -q "${CPU_LIMIT[@]}" --label "org.ferry.content-hash=$h" -t "$tag" -f "$file" "$@" "$ctx" \
    >"$BUILD/last-build.log" 2>&1 \
    || { cat "$BUILD/last-build.log" >&2; echo "build.sh: docker build of $tag failed" >&2; exit 1; }
}

# --- the apt mirror this machine is configured with (deb822 .sources or sources.list) ---------------
apt_mirror() {  # apt_mirror SUITE -> the first URI serving that suite
  local suite="$1" f
  for f in /etc/apt/sources.list.d/*.sources; do
    [[ -e "$f" ]] || continue
    awk -v s="$suite" 'BEGIN{RS="";FS="\n"} /(^|\n)Types:[^\n]*deb( |$|\n)/ {
        uri="";ok=0; for(i=1;i<=NF;i++){ if($i ~ /^URIs:/){split($i,a," "); uri=a[2]}
                                         if($i ~ /^Suites:/){n=split($i,b," "); for(j=2;j<=n;j++) if(b[j]==s) ok=1} }
        if(ok && uri!=""){print uri; exit} }' "$f"
  done | head -1 | grep . && return 0
  awk -v s="$suite" '$1=="deb" && $3==s {print $2; exit}' /etc/apt/sources.list 2>/dev/null | grep . && return 0
  return 1
}

# --- debian: debootstrap + docker import -------------------------------------------------------------
MIRROR="${FERRY_DEBIAN_MIRROR:-$(apt_mirror $SUITE || true)}"
SEC_MIRROR="${FERRY_DEBIAN_SECURITY_MIRROR:-$(apt_mirror $SUITE-security || true)}"
DEBIAN_HASH=$(printf '%s\n' "$SUITE" minbase "$MIRROR" "$SEC_MIRROR" "$DEBIAN_INCLUDE" v1 | hash_of)
DEBIAN_TAG="ferry-debian:12-$DEBIAN_HASH"
if want debian; then
  if have_image "$DEBIAN_TAG"; then
    say "reuse $DEBIAN_TAG"
  else
    [[ -n "$MIRROR" ]] || { echo "build.sh: no Debian mirror for '$SUITE' in /etc/apt/sources.list(.d); set FERRY_DEBIAN_MIRROR" >&2; exit 1; }
    if ! command -v debootstrap >/dev/null; then
      say "installing debootstrap (apt)"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    say "debootstrap $SUITE from $MIRROR"
    rootfs="$BUILD/rootfs"
    rm -rf "$rootfs"
    debootstrap --variant=minbase ${DEBIAN_INCLUDE:+--include=$DEBIAN_INCLUDE} "$SUITE" "$rootfs" "$MIRROR" \
      >"$BUILD/debootstrap.log" 2>&1 || { tail -20 "$BUILD/debootstrap.log" >&2; exit 1; }
    {
      echo "deb $MIRROR $SUITE main"
      echo "deb $MIRROR $SUITE-updates main"
      [[ -n "$SEC_MIRROR" ]] && echo "deb $SEC_MIRROR $SUITE-security main"
    } >"$rootfs/etc/apt/sources.list"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
    echo "ferry" >"$rootfs/etc/hostname"
    timing debootstrap
    tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' \
      --change "LABEL org.ferry.content-hash=$DEBIAN_HASH" - "$DEBIAN_TAG" >/dev/null
    rm -rf "$rootfs"
    timing "docker import"
    prune_old ferry-debian "12-$DEBIAN_HASH"
  fi
fi

# --- base: python, Java, ZooKeeper, systemd -----------------------------------------------------------
BASE_HASH=$( { echo "$DEBIAN_TAG"; cat "$HERE/Dockerfile.base"; } | hash_of)
BASE_TAG="ferry-base:$BASE_HASH"
if want base; then
  if have_image "$BASE_TAG"; then
    say "reuse $BASE_TAG"
  else
    say "building $BASE_TAG (apt: python3, Java, ZooKeeper, systemd)"
    ctx="$BUILD/ctx-base"; rm -rf "$ctx"; mkdir -p "$ctx"
    docker_build "$BASE_TAG" "$BASE_HASH" "$HERE/Dockerfile.base" "$ctx" --build-arg "DEBIAN=$DEBIAN_TAG"
    timing "ferry-base"
    prune_old ferry-base "$BASE_HASH"
  fi
  docker tag "$BASE_TAG" ferry-base:latest
fi

# --- ferry's sources and wheels ---------------------------------------------------------------------
# the package folders, as pyproject.toml maps them into the ferry namespace (one list: no drift)
mapfile -t PACKAGES < <(python3 -c 'import sys,tomllib
print("\n".join(sorted(set(tomllib.load(open(sys.argv[1],"rb"))["tool"]["setuptools"]["package-dir"].values()))))' \
  "$ROOT/pyproject.toml")
src_hash() {
  (cd "$ROOT" && find pyproject.toml setup.py MANIFEST.in "${PACKAGES[@]}" dags -type f ! -path '*__pycache__*' \
     ! -name '*.pyc' ! -name '*.so' ! -name '*.c' 2>/dev/null \
     | LC_ALL=C sort | xargs sha256sum) | hash_of
}
runtime_requirements() {  # the pinned runtime dependencies from pyproject.toml
  python3 -c 'import sys,tomllib; print("\n".join(tomllib.load(open(sys.argv[1],"rb"))["project"]["dependencies"]))' \
    "$ROOT/pyproject.toml"
}
warehouse_requirements() {  # warehouse extras + Airflow and its Spark provider, versions from the lock
  python3 - "$ROOT/pyproject.toml" "$ROOT/requirements/lock.txt" <<'PY'
import re, sys, tomllib
extras = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["warehouse"]
lock = {}
for line in open(sys.argv[2]):
    m = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", line.strip())
    if m:
        lock[m.group(1).lower()] = m.group(2)
tops = list(extras) + ["apache-airflow", "apache-airflow-providers-apache-spark", "pyspark-client"]
for t in tops:
    name = re.split(r"[<>=!~ ;\[]", t)[0].lower()
    print(f"{name}=={lock[name]}" if name in lock else t)
PY
}
build_ferry_wheel() {  # -> $BUILD/wheels/ferry/ferry-*.whl for the current sources
  local src="$BUILD/src"
  rm -rf "$src" "$BUILD/wheels/ferry"; mkdir -p "$src" "$BUILD/wheels/ferry"
  (cd "$ROOT" && cp -r pyproject.toml "${PACKAGES[@]}" "$src"/ && for f in setup.py MANIFEST.in; do
     if [[ -f $f ]]; then cp "$f" "$src"/; fi; done)
  # the wheel compiles ferry's native parts itself (its build declares them): no in-place build products
  find "$src" -name __pycache__ -prune -exec rm -rf {} +
  find "$src" \( -name '*.so' -o -name '*.c' \) -delete
  pip_host wheel -q --no-deps --no-build-isolation -w "$BUILD/wheels/ferry" "$src" >"$BUILD/pip-ferry.log" 2>&1 \
    || { cat "$BUILD/pip-ferry.log" >&2; exit 1; }
  rm -rf "$src"
}
make_ctx() {  # make_ctx DIR REQUIREMENTS_FILE WHEEL_DIR... : a small build context (hard links, no copies)
  local ctx="$1" req="$2"; shift 2
  rm -rf "$ctx"; mkdir -p "$ctx/wheels" "$ctx/dags"
  cp "$req" "$ctx/requirements.txt"
  for d in "$@"; do cp -l "$d"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$d"/*.whl "$ctx/wheels/"; done
  [[ -d "$ROOT/dags" ]] && cp -r "$ROOT/dags/." "$ctx/dags/" && find "$ctx/dags" -name __pycache__ -prune -exec rm -rf {} +
  return 0
}
SRC_HASH=""
if want ferry || want loader || want wheels; then SRC_HASH=$(src_hash); fi

# --- ferry: base + venv + ferry ----------------------------------------------------------------------
FERRY_HASH=$( { echo "$BASE_TAG $SRC_HASH"; cat "$HERE/Dockerfile.ferry"; } | hash_of)
FERRY_TAG="ferry:$FERRY_HASH"
ferry_wheels_ready=0
ensure_runtime_wheels() {
  [[ $ferry_wheels_ready -eq 1 ]] && return 0
  runtime_requirements >"$BUILD/requirements-runtime.txt"
  mkdir -p "$BUILD/wheels/runtime"
  pip_host wheel -q -w "$BUILD/wheels/runtime" --find-links "$BUILD/wheels/runtime" -r "$BUILD/requirements-runtime.txt" \
    >"$BUILD/pip-runtime.log" 2>&1 || { cat "$BUILD/pip-runtime.log" >&2; exit 1; }
  build_ferry_wheel
  ferry_wheels_ready=1
  timing "wheels (runtime)"
}
if want ferry; then
  if have_image "$FERRY_TAG"; then
    say "reuse $FERRY_TAG"
  else
    say "building $FERRY_TAG"
    ensure_runtime_wheels
    make_ctx "$BUILD/ctx-ferry" "$BUILD/requirements-runtime.txt" "$BUILD/wheels/runtime" "$BUILD/wheels/ferry"
    docker_build "$FERRY_TAG" "$FERRY_HASH" "$HERE/Dockerfile.ferry" "$BUILD/ctx-ferry" --build-arg "BASE=$BASE_TAG"
    rm -rf "$BUILD/ctx-ferry"
    timing "ferry"
    prune_old ferry "$FERRY_HASH"
  fi
  docker tag "$FERRY_TAG" ferry:latest
fi

# --- wheels: a wheelhouse for the Ansible roles (pip install --no-index --find-links) -----------------
if want wheels; then
  if [[ $FORCE -eq 0 && -f "$BUILD/wheelhouse.tar" && "$(cat "$BUILD/wheelhouse/.content-hash" 2>/dev/null)" == "$SRC_HASH" ]]; then
    say "reuse build/wheelhouse"
  else
    say "building build/wheelhouse"
    ensure_runtime_wheels
    rm -rf "$BUILD/wheelhouse"; mkdir -p "$BUILD/wheelhouse"
    cp "$BUILD/wheels/runtime/"*.whl "$BUILD/wheels/ferry/"*.whl "$BUILD/wheelhouse/"
    cp "$BUILD/requirements-runtime.txt" "$BUILD/wheelhouse/requirements.txt"
    echo "$SRC_HASH" >"$BUILD/wheelhouse/.content-hash"
    # One archive for Ansible to copy (byte-identical while the content is: no mtimes, owners or order).
    tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$BUILD/wheelhouse" -cf "$BUILD/wheelhouse.tar.new" .
    mv "$BUILD/wheelhouse.tar.new" "$BUILD/wheelhouse.tar"
  fi
fi

# --- warehouse base: PySpark + Airflow ---------------------------------------------------------------
WH_HASH=$( { echo "$BASE_TAG"; cat "$HERE/Dockerfile.pydeps"; warehouse_requirements; } | hash_of)
WH_TAG="ferry-warehouse-base:$WH_HASH"
if want warehouse; then
  if have_image "$WH_TAG"; then
    say "reuse $WH_TAG"
  else
    say "building $WH_TAG (PySpark, Airflow: the slow one)"
    warehouse_requirements >"$BUILD/requirements-warehouse.txt"
    mkdir -p "$BUILD/wheels/warehouse"
    pip_host wheel -q -w "$BUILD/wheels/warehouse" --find-links "$BUILD/wheels/warehouse" \
      -c "$ROOT/requirements/lock.txt" -r "$BUILD/requirements-warehouse.txt" >"$BUILD/pip-warehouse.log" 2>&1 \
      || { cat "$BUILD/pip-warehouse.log" >&2; exit 1; }
    timing "wheels (warehouse)"
    make_ctx "$BUILD/ctx-warehouse" "$BUILD/requirements-warehouse.txt" "$BUILD/wheels/warehouse"
    docker_build "$WH_TAG" "$WH_HASH" "$HERE/Dockerfile.pydeps" "$BUILD/ctx-warehouse" --build-arg "BASE=$BASE_TAG"
    rm -rf "$BUILD/ctx-warehouse"
    timing "ferry-warehouse-base"
    prune_old ferry-warehouse-base "$WH_HASH"
  fi
  docker tag "$WH_TAG" ferry-warehouse-base:latest
fi

# --- loader: warehouse base + ferry ------------------------------------------------------------------
LOADER_HASH=$( { echo "$WH_TAG $SRC_HASH"; cat "$HERE/Dockerfile.ferry"; } | hash_of)
LOADER_TAG="ferry-loader:$LOADER_HASH"
if want loader; then
  if have_image "$LOADER_TAG"; then
    say "reuse $LOADER_TAG"
  else
    say "building $LOADER_TAG"
    ensure_runtime_wheels
    make_ctx "$BUILD/ctx-loader" "$BUILD/requirements-runtime.txt" "$BUILD/wheels/runtime" "$BUILD/wheels/ferry"
    docker_build "$LOADER_TAG" "$LOADER_HASH" "$HERE/Dockerfile.ferry" "$BUILD/ctx-loader" --build-arg "BASE=$WH_TAG"
    rm -rf "$BUILD/ctx-loader"
    timing "ferry-loader"
    prune_old ferry-loader "$LOADER_HASH"
  fi
  docker tag "$LOADER_TAG" ferry-loader:latest
fi

# Record what this run built or reused (other keys from earlier runs stay).
record() { touch "$BUILD/images.env"; { grep -v "^$1=" "$BUILD/images.env" || true; echo "$1=$2"; } >"$BUILD/images.env.new"
           mv "$BUILD/images.env.new" "$BUILD/images.env"; }
want debian && record FERRY_DEBIAN_IMAGE "$DEBIAN_TAG"
want base && record FERRY_BASE_IMAGE "$BASE_TAG"
want ferry && record FERRY_IMAGE "$FERRY_TAG"
want warehouse && record FERRY_WAREHOUSE_BASE_IMAGE "$WH_TAG"
want loader && record FERRY_LOADER_IMAGE "$LOADER_TAG"
want wheels && record FERRY_WHEELHOUSE "$BUILD/wheelhouse"
say "done: $(LC_ALL=C sort "$BUILD/images.env" | tr '\n' ' ')"
