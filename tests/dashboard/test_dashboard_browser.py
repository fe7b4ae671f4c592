"""A real browser (Debian's headless chromium, driven by selenium) against `ferry dashboard` over a running
demo pipeline: `ferry demo --short --keep-running` loads its hours and prints the dashboard's URL; the
completeness grid shows the demo's hours complete; once the demo's mirror stops and more is published live,
the current hour's cell turns incomplete on the page's next refresh, without a reload. The loads, flow and
clusters pages show the demo's runs, plots and brokers; a dashboard whose ZooKeeper is unreachable keeps
serving and says so in its banner. The screenshot goes to the test's temporary directory; with
FERRY_UPDATE_SCREENSHOT=1 it replaces docs/dashboard.png (the README's picture) instead, so that a test run
leaves the checkout as it found it.

Skipped, saying why, only where chromium or its driver cannot start."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ferry.client.audit.bucket import hour_start
from ferry.dashboard.process import start_dashboard
from ferry.embedded import free_port
from tests.mirror.mirror_harness import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DOCS_SCREENSHOT = ROOT / "docs" / "dashboard.png"


def _browser():
    """A headless chromium, or a skip naming what is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (requirements/lock.txt; scripts/setup.sh)")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        pytest.skip("Debian's chromium and chromium-driver packages are not installed (scripts/setup.sh)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,900"):
        opts.add_argument(a)
    try:
        return webdriver.Chrome(service=Service(driver), options=opts)
    except Exception as e:  # noqa: BLE001 - e.g. no usable display/sandbox on this host
        pytest.skip(f"chromium cannot start here: {type(e).__name__}: {str(e).splitlines()[0]}")


def _text(browser, element_id: str) -> str:
    """An element's rendered text in one script call (the page's refresh may replace the element between a
    find and a read, which selenium reports as a stale element reference)."""
    return browser.execute_script("const e = document.getElementById(arguments[0]); return e ? e.innerText : '';",
                                  element_id)


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def _children(pid: int) -> dict[int, str]:
    """{pid: command line} of the processes whose parent is ``pid``."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                out[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
    return out


def test_demo_dashboard_in_a_real_browser(tmp_path):
    browser = _browser()
    port = free_port()
    out_path = tmp_path / "demo.out"
    out = open(out_path, "wb")  # noqa: SIM115 - closed in finally
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONUNBUFFERED="1")
    demo = subprocess.Popen([sys.executable, "-m", "ferry.cli", "demo", "--short", "--keep-running",
                             "--dir", str(tmp_path / "demo"), "--dashboard-listen", f"127.0.0.1:{port}"],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    children: dict[int, str] = {}
    try:
        def said() -> str:
            return out_path.read_text(errors="replace")

        def running() -> bool:
            assert demo.poll() is None, "ferry demo exited:\n" + said()[-4000:]
            return "everything is still running" in said()

        wait_for(running, 1200, "ferry demo --keep-running to load its hours and start the dashboard")
        url = f"http://127.0.0.1:{port}/"
        assert f"dashboard: {url}" in said(), said()[-3000:]  # the demo prints the dashboard's URL
        live_zk, offline_zk = re.search(r"live ZooKeeper (\S+), offline (\S+)", said()).groups()
        children = _children(demo.pid)
        report = json.loads((tmp_path / "demo" / "last-report.json").read_text())
        demo_hours = {(b["topic"], b["hour_start"]) for b in report["books"]}
        assert report["complete"] and len(demo_hours) == 3 * 2

        browser.get(url)

        def cell(topic: str, hour: int) -> str:
            return f'td.cell[data-topic="{topic}"][data-hour="{hour}"]'

        def cell_attrs(topic: str, hour: int) -> dict | None:
            """The cell's status, title and class read in one script call: the page's refresh replaces the
            grid's cells, so an element found in one call can be stale by the next (StaleElementReference)."""
            return browser.execute_script(
                "const c = document.querySelector(arguments[0]);"
                "return c && {status: c.dataset.status, title: c.title, cls: c.className};", cell(topic, hour))

        def status(topic: str, hour: int) -> str | None:
            attrs = cell_attrs(topic, hour)
            return attrs["status"] if attrs else None

        wait_for(lambda: all(status(t, h) == "complete" for t, h in demo_hours), 60, "the demo's hours to show complete")
        topic, hour = min(demo_hours)
        produced = next(b["produced"] for b in report["books"] if (b["topic"], b["hour_start"]) == (topic, hour))
        attrs = cell_attrs(topic, hour)
        assert f"produced {produced}" in attrs["title"] and "complete" in attrs["cls"], attrs
        browser.execute_script("document.querySelector(arguments[0]).click();", cell(topic, hour))
        wait_for(lambda: browser.find_elements("css selector", "#buckets tr"), 15, "the drill-down table")
        assert len(browser.find_elements("css selector", "#buckets tr")) == 7  # header + six buckets

        # the demo's mirror link is paused (the operator's command); more is published live: the current hour
        # turns incomplete in place
        marker = browser.execute_script("window.__noReload = 1; return window.__noReload;")
        paused = subprocess.run([sys.executable, "-m", "ferry.cli", "mirror", "link", "pause", "live",
                                 "--zookeeper", offline_zk], capture_output=True, text=True, env=env, timeout=60)
        assert paused.returncode == 0 and "mirror link live: paused" in paused.stdout, paused.stdout + paused.stderr
        from ferry.client.producer import Producer

        now_hour = hour_start(int(time.time() * 1000))
        with Producer(zookeeper=live_zk, application="web") as p:
            for i in range(7):
                p.send("page_view", b"late %d" % i, timestamp_ms=now_hour + i)
        wait_for(lambda: status("page_view", now_hour) == "incomplete", 60, "the current hour to turn incomplete")
        assert browser.execute_script("return window.__noReload;") == marker  # refreshed in place
        assert "missing 7" in cell_attrs("page_view", now_hour)["title"]

        shot = DOCS_SCREENSHOT if os.environ.get("FERRY_UPDATE_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        width, height = _png_size(shot)
        assert (width, height) >= (800, 500) and shot.stat().st_size > 10_000

        browser.get(url + "loads")  # the demo's hourly DAG runs, committed, with the hours they touched
        wait_for(lambda: len(browser.find_elements("css selector", "#runs tr.committed")) >= 2, 20, "the loads page")
        assert not browser.find_elements("css selector", "#runs tr.failed")
        assert "page_view" in _text(browser, "runs")
        browser.get(url + "flow")
        wait_for(lambda: len(browser.find_elements("css selector", "img.flow")) >= 3, 20, "the flow page's plots")
        # the demo's mirror link in the flow page's links table, shown paused
        wait_for(lambda: "paused" in _text(browser, "links"), 20, "the flow page's mirror links to show the pause")
        assert "live" in _text(browser, "links")
        assert "mirror links:" not in _text(browser, "banner")
        browser.get(url + "clusters")
        wait_for(lambda: "live cluster" in _text(browser, "clusters"), 20, "the clusters page")
        assert _text(browser, "clusters").count("(live)") >= 2  # the demo's two live brokers

        # a dashboard whose clusters cannot be reached keeps serving and says so on the page
        down_port = free_port()
        down = start_dashboard(tmp_path / "down.out", "127.0.0.1:1/offline", ["127.0.0.1:1/live"], None,
                               "127.0.0.1", down_port)
        try:
            for page, needle in (("", "unreachable"), ("clusters", "ZooKeeper unreachable")):
                browser.get(f"http://127.0.0.1:{down_port}/{page}")
                wait_for(lambda needle=needle: needle in _text(browser, "banner"), 30,
                         f"the {page or 'completeness'} page to say the clusters are unreachable")
                assert browser.find_element("id", "banner").is_displayed()
        finally:
            down.stop()
    finally:
        browser.quit()
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)  # the demo stops its dashboard, mirror, brokers and ZooKeeper
            try:
                demo.wait(120)
            except subprocess.TimeoutExpired:
                demo.kill()
                demo.wait(10)
        for pid, cmd in children.items():  # what the demo could not stop (its children have their own sessions)
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") == cmd:
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        out.close()
