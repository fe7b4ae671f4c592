"""A real browser (Debian's headless chromium, driven by selenium) against `ferry dashboard` over a running
pipeline: the grid shows the complete hour; once the mirror stops and more is produced live, the current
hour's cell turns incomplete on the page's next refresh, without a reload. Leaves docs/dashboard.png.

Skipped, saying why, only where chromium or its driver cannot start."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ferry.client.audit.bucket import hour_start
from tests.dashboard.pipeline import TOPIC, start_pipeline
from tests.mirror.mirror_harness import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "dashboard.png"


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def test_grid_in_a_real_browser(cluster_factory, tmp_path):
    browser = _browser()
    pipe = start_pipeline(cluster_factory, tmp_path)
    port = _free_port()
    log = open(tmp_path / "dashboard.log", "wb")  # noqa: SIM115 - closed in finally
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    dash = subprocess.Popen([sys.executable, "-m", "ferry.cli", "dashboard", "--zookeeper", pipe.offline_zk,
                             "--live-zookeeper", pipe.live_zk, "--state-dir", str(pipe.state_dir),
                             "--listen", f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        def up() -> bool:
            try:
                return urllib.request.urlopen(url + "healthz", timeout=2).status == 200
            except OSError:
                return False

        wait_for(up, 30, "ferry dashboard to listen")
        browser.get(url)

        def status(hour: int) -> str | None:
            cells = browser.find_elements("css selector", f'td.cell[data-topic="{TOPIC}"][data-hour="{hour}"]')
            return cells[0].get_attribute("data-status") if cells else None

        wait_for(lambda: status(pipe.past_hour) == "complete", 30, "the past hour to show complete")
        cell = browser.find_element("css selector", f'td.cell[data-topic="{TOPIC}"][data-hour="{pipe.past_hour}"]')
        assert "produced 40" in cell.get_attribute("title") and "complete" in cell.get_attribute("class")
        cell.click()
        wait_for(lambda: browser.find_elements("css selector", "#buckets tr"), 15, "the drill-down table")
        assert len(browser.find_elements("css selector", "#buckets tr")) == 7  # header + six buckets

        marker = browser.execute_script("window.__noReload = 1; return window.__noReload;")
        pipe.mirror.stop()
        now_hour = hour_start(int(time.time() * 1000))
        pipe.produce(7, now_hour)
        wait_for(lambda: status(now_hour) == "incomplete", 40, "the current hour to turn incomplete")
        assert browser.execute_script("return window.__noReload;") == marker  # refreshed in place
        assert "missing 7" in browser.find_element(
            "css selector", f'td.cell[data-topic="{TOPIC}"][data-hour="{now_hour}"]').get_attribute("title")

        browser.save_screenshot(str(SCREENSHOT))
        width, height = _png_size(SCREENSHOT)
        assert (width, height) >= (800, 500) and SCREENSHOT.stat().st_size > 10_000

        for page in ("flow", "loads", "clusters"):  # the other pages render their polled data
            browser.get(url + page)
            wait_for(lambda: browser.find_element("id", "updated").text.startswith("updated"), 20, f"{page} page")
            assert browser.find_element("id", "banner").is_displayed() is False
    finally:
        browser.quit()
        dash.terminate()
        dash.wait(10)
        log.close()
        pipe.mirror.stop()
