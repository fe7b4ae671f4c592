"""The schema tests' shared fixture: one `ferry schemas serve` process (a real server over a real ZooKeeper
chroot) per test module that asks for it."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pytest

from ferry.embedded import free_port


@pytest.fixture(scope="module")
def registry_zk(zk_server) -> str:
    return f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def registry_url(registry_zk: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    out = tmp_path_factory.mktemp("serve") / "serve.out"
    port = free_port()
    log = open(out, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "schemas", "serve", "--listen", f"127.0.0.1:{port}",
                             "--zookeeper", registry_zk], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(url + "/subjects", timeout=2).read()
            break
        except (urllib.error.URLError, ConnectionError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("ferry schemas serve did not start: " + out.read_text()) from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=20)
    log.close()
