"""Helpers of the REST tests: a real `ferry schemas serve` process, and one HTTP call with Confluent's media type."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ferry.embedded import free_port


@contextmanager
def serve_registry(zk: str, log_path: Path) -> Iterator[str]:
    """`ferry schemas serve` over the registry at ``zk`` on a free loopback port; its URL until the block ends."""
    port = free_port()
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "schemas", "serve", "--listen", f"127.0.0.1:{port}",
                             "--zookeeper", zk], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/subjects", timeout=2).read()
                break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise AssertionError("ferry schemas serve did not start: " + log_path.read_text()) from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


def call(url: str, method: str = "GET", body: object = None, raw: bytes | None = None) -> tuple[int, object]:
    """(HTTP status, decoded JSON answer) of one request; error answers are returned, not raised."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
