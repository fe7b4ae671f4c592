"""Benchmarks on the artifact: the headline figures measured on ferry installed from its wheel in a fresh
virtual environment, and on this checkout, interleaved in one run (issue 37 item 6).

Steps: build the wheel from this checkout's tracked files (a clean copy: no in-place .so or .c; the build
compiles the native parts itself, FERRY_REQUIRE_NATIVE=1), make a fresh venv outside the checkout and install
the wheel there with its pinned dependencies (``ferry[warehouse]`` and psutil, constrained by
requirements/lock.txt; PyPI or pip's cache), check that `ferry version` in that venv reports every native part
on, then run each benchmark once per side, the sides alternating first, every run with a temporary directory
as its working directory so that nothing of the checkout is importable by accident. Every benchmark process
reports which files its ``ferry`` modules came from; a run whose ferry is not the side's (the venv's
site-packages, or the checkout) stops the comparison. Brokers the benchmarks start are ``sys.executable -m
ferry.cli``: the same side's ferry.

The benchmarks (small sizes: the whole run takes minutes, not the suite's hours):
- batch-1 produce: bench/bench_small_requests.py, the broker's CPU per one-message Produce request (median);
- message sets: bench/ab_message_sets.py, produce and consume rates and the client's CPU per message;
- mirror copy: bench/ab_mirror.py, the mirror's copy rate and CPU per message, per batch shape;
- load: bench/bench_load.py, `ferry load` rows/s end to end, the split reader's rows/s, Python workers' CPU.

    .venv/bin/python bench/on_wheel.py [--workdir DIR] [--wheel WHEEL] [--venv DIR] [--skip-load] [--json FILE]

``--venv DIR`` keeps the fresh venv there (made when missing, else reused if it holds the same wheel);
``--wheel`` uses a wheel built before instead of building one.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
CHECKOUT_PYTHON = ROOT / ".venv" / "bin" / "python"

# Runs a bench script as `python script.py ARGS` would (its folder first on sys.path), then says where every
# ferry module it imported came from.
RUNNER = """
import json, os, runpy, sys
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(script)
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as e:
    if e.code not in (None, 0):
        raise
finally:
    files = sorted({m.__file__ for n, m in list(sys.modules.items())
                    if (n == "ferry" or n.startswith("ferry.")) and getattr(m, "__file__", None)})
    print("ON_WHEEL_FERRY_FILES " + json.dumps(files), flush=True)
"""


class Side:
    """One way of running ferry: an interpreter, and the folder every ferry module must come from."""

    def __init__(self, name: str, python: Path, ferry_home: Path) -> None:
        self.name = name
        self.python = python
        self.ferry_home = ferry_home

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "FERRY_NATIVE", "FERRY_NATIVE_DISABLE", "VIRTUAL_ENV")}
        env.update(FERRY_REQUIRE_NATIVE="1", PYSPARK_PYTHON=str(self.python), PYSPARK_DRIVER_PYTHON=str(self.python),
                   SPARK_LOCAL_IP="127.0.0.1", PYTHONUNBUFFERED="1")
        return env

    def run(self, script: str, args: list[str], cwd: Path, timeout: float) -> str:
        cmd = [str(self.python), "-c", RUNNER, str(BENCH / script), *args]
        p = subprocess.run(cmd, cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise SystemExit(f"on_wheel: {script} on {self.name} failed ({p.returncode}):\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        line = next((x for x in p.stdout.splitlines() if x.startswith("ON_WHEEL_FERRY_FILES ")), None)
        files = json.loads(line.split(" ", 1)[1]) if line else []
        stray = [f for f in files if not Path(f).resolve().is_relative_to(self.ferry_home.resolve())]
        if not files or stray:
            raise SystemExit(f"on_wheel: {script} on {self.name} imported ferry from elsewhere than "
                             f"{self.ferry_home}: {stray or 'no ferry module at all'}")
        return p.stdout


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout's tracked files (working-tree content), built in a clean copy."""
    src = out / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    wheels = out / "wheels"
    env = dict(os.environ, FERRY_REQUIRE_NATIVE="1")
    p = subprocess.run([str(CHECKOUT_PYTHON), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheels), str(src)], env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"on_wheel: building the wheel failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    shutil.rmtree(src)
    (wheel,) = wheels.glob("ferry-*.whl")
    return wheel


def base_python() -> str:
    """The interpreter the checkout's venv was made from (same Python for both sides)."""
    cfg = (ROOT / ".venv" / "pyvenv.cfg").read_text()
    m = re.search(r"^executable\s*=\s*(.+)$", cfg, re.M)
    return m.group(1).strip() if m else sys.executable


def wheel_digest(wheel: Path) -> str:
    return hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]


def make_venv(venv: Path, wheel: Path) -> None:
    """A fresh venv holding the wheel and its pinned dependencies; reused when it holds this very wheel."""
    stamp = venv / ".on-wheel"
    if stamp.exists() and stamp.read_text() == wheel_digest(wheel):
        print(f"reusing {venv} (same wheel)", flush=True)
        return
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([base_python(), "-m", "venv", str(venv)], check=True, timeout=300)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    lock = ROOT / "requirements" / "lock.txt"
    pins = {m.group(1).lower(): m.group(0) for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==\S+", lock.read_text(), re.M)}
    for step in ([pins.get("pip", "pip")],
                 ["-c", str(lock), f"{wheel}[warehouse]", pins.get("psutil", "psutil")]):
        p = subprocess.run([*pip, *step], capture_output=True, text=True, timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"on_wheel: pip install {' '.join(step)} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    stamp.write_text(wheel_digest(wheel))


def check_native(side: Side, cwd: Path) -> str:
    """`ferry version` of the side, from outside the checkout: every native part must be on."""
    p = subprocess.run([str(side.python), "-m", "ferry.cli", "version"], cwd=cwd, env=side.env(), capture_output=True,
                       text=True, timeout=120)
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in p.stdout.splitlines() if line.strip())
    native = {k: v for k, v in rows.items() if k.startswith("native ")}
    if p.returncode != 0 or len(native) < 7 or any(v != "on" for v in native.values()):
        raise SystemExit(f"on_wheel: {side.name}: not every native part is on:\n{p.stdout}{p.stderr}")
    where = subprocess.run([str(side.python), "-c", "import ferry.wire.native as n; print(n.__file__)"], cwd=cwd,
                           env=side.env(), capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    if not Path(where).resolve().is_relative_to(side.ferry_home.resolve()):
        raise SystemExit(f"on_wheel: {side.name}: ferry imports from {where}, not {side.ferry_home}")
    return rows.get("ferry", "?")


# ---------------------------------------------------------------------------- the benchmarks and their figures
Figures = dict[str, float]


def small_requests(side: Side, cwd: Path, args: argparse.Namespace) -> Figures:
    out = cwd / "small.json"
    side.run("bench_small_requests.py", ["--requests", str(args.requests), "--rounds", "3", "--json", str(out)],
             cwd, 900)
    return {"batch-1 produce: broker CPU per request (µs, median of 3)":
            json.loads(out.read_text())["median_broker_us_per_request"]}


MSGSETS = re.compile(r"produce ([\d.]+) M msg/s \(([\d.]+) us/msg, client CPU ([\d.]+) us/msg\), "
                     r"consume ([\d.]+) M msg/s \(([\d.]+) us/msg, client CPU ([\d.]+) us/msg\)")


def message_sets(side: Side, cwd: Path, args: argparse.Namespace) -> Figures:
    m = MSGSETS.search(side.run("ab_message_sets.py", [side.name, str(args.messages)], cwd, 900))
    if m is None:
        raise SystemExit("on_wheel: ab_message_sets.py printed no result line")
    return {"message-set produce, batch 50 (M msg/s, best of 3)": float(m.group(1)),
            "message-set produce: client CPU (µs/msg)": float(m.group(3)),
            "message-set consume (M msg/s, best of 3)": float(m.group(4)),
            "message-set consume: client CPU (µs/msg)": float(m.group(6))}


MIRROR = re.compile(r": (.+?)\s{2,}([\d,]+) msgs/s, mirror process CPU ([\d.]+) us/msg")


def mirror(side: Side, cwd: Path, args: argparse.Namespace) -> Figures:
    out = side.run("ab_mirror.py", [side.name, "--messages", str(args.mirror_messages), "--rounds", "2"], cwd, 1200)
    figures = {}
    for m in MIRROR.finditer(out):
        figures[f"mirror copy, {m.group(1).strip()} (msgs/s, best of 2)"] = float(m.group(2).replace(",", ""))
        figures[f"mirror CPU, {m.group(1).strip()} (µs/msg)"] = float(m.group(3))
    if not figures:
        raise SystemExit("on_wheel: ab_mirror.py printed no result line")
    return figures


def load(side: Side, cwd: Path, args: argparse.Namespace) -> Figures:
    out = cwd / "load.json"
    side.run("bench_load.py", ["--events", str(args.load_events), "--topics", "page_view", "--partitions", "2",
                               "--repeat", "1", "--small", "100", "--json", str(out)], cwd, 1800)
    doc = json.loads(out.read_text())
    if doc.get("native") is not True:
        raise SystemExit(f"on_wheel: bench_load.py on {side.name} ran without the native decoders")
    run = doc["runs"][0]
    return {"ferry load end to end (rows/s)": run["load_rows"] / run["load_s"],
            "split reader alone (rows/s)": run["split_rows"] / run["split_s"],
            "load: Python workers' CPU (µs/row)": run["cpu"]["python workers"] / run["load_rows"] * 1e6}


BENCHMARKS: list[tuple[str, Callable[[Side, Path, argparse.Namespace], Figures]]] = [
    ("batch-1 produce", small_requests), ("message sets", message_sets), ("mirror", mirror), ("load", load)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", help="where the wheel, the venv and the runs' directories go (default: a "
                    "temporary directory, removed at the end)")
    ap.add_argument("--wheel", help="a ferry wheel built before (default: build one from this checkout)")
    ap.add_argument("--venv", help="keep the fresh venv here (reused when it holds the same wheel)")
    ap.add_argument("--requests", type=int, default=40_000, help="one-message requests per round (default 40000)")
    ap.add_argument("--messages", type=int, default=200_000, help="message-set messages per round (default 200000)")
    ap.add_argument("--mirror-messages", type=int, default=100_000, help="messages per mirror case (default 100000)")
    ap.add_argument("--load-events", type=int, default=60_000, help="events loaded (default 60000)")
    ap.add_argument("--skip-load", action="store_true", help="leave out the Spark load (the longest part)")
    ap.add_argument("--json", help="write every figure here")
    args = ap.parse_args()
    if not CHECKOUT_PYTHON.exists():
        print(f"on_wheel: {CHECKOUT_PYTHON} is missing (scripts/setup.sh)", file=sys.stderr)
        return 2
    started = time.time()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="ferry-on-wheel-")).resolve()
    if work.is_relative_to(ROOT):
        print("on_wheel: --workdir must be outside the checkout", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.time()
        wheel = Path(args.wheel).resolve() if args.wheel else build_wheel(work / "build")
        print(f"wheel: {wheel.name} ({time.time() - t0:.0f} s)", flush=True)
        venv = Path(args.venv).resolve() if args.venv else work / "venv"
        t0 = time.time()
        make_venv(venv, wheel)
        print(f"fresh venv: {venv} ({time.time() - t0:.0f} s)", flush=True)
        site = next((venv / "lib").glob("python3*/site-packages"))
        sides = [Side("wheel", venv / "bin" / "python", site / "ferry"), Side("checkout", CHECKOUT_PYTHON, ROOT)]
        outside = work / "cwd"
        outside.mkdir(exist_ok=True)
        for side in sides:
            print(f"{side.name}: ferry {check_native(side, outside)}, every native part on, from {side.ferry_home}",
                  flush=True)
        results: dict[str, dict[str, float]] = {s.name: {} for s in sides}
        for k, (name, bench) in enumerate(BENCHMARKS):
            if name == "load" and args.skip_load:
                continue
            for side in sides if k % 2 == 0 else sides[::-1]:  # alternate which side goes first
                cwd = Path(tempfile.mkdtemp(prefix=f"{side.name}-", dir=outside))
                t0 = time.time()
                figures = bench(side, cwd, args)
                results[side.name].update(figures)
                print(f"{name} on {side.name} ({time.time() - t0:.0f} s): "
                      + "; ".join(f"{k2} {v:,.3f}" for k2, v in figures.items()), flush=True)
                shutil.rmtree(cwd, ignore_errors=True)
        print(f"\n{time.time() - started:.0f} s in all\n")
        print("| figure | wheel (fresh venv) | checkout | wheel / checkout |")
        print("| --- | ---: | ---: | ---: |")
        for fig, value in results["wheel"].items():
            other = results["checkout"].get(fig)
            ratio = f"{value / other:.2f}" if other else "-"
            print(f"| {fig} | {value:,.2f} | {other:,.2f} | {ratio} |")
        if args.json:
            Path(args.json).write_text(json.dumps({"wheel": wheel.name, "results": results}, indent=1))
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
