"""`ferry zookeeper` runs a real ZooKeeper in the foreground; data survives a restart."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from ferry.embedded import free_port


def _serving(port: int, timeout: float = 60.0) -> None:
    """Wait until ZooKeeper takes sessions (`srvr` answers; `ruok` says imok earlier than that)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"srvr")
                reply = b""
                while chunk := s.recv(4096):
                    reply += chunk
            if reply.startswith(b"Zookeeper version") and b"not currently serving" not in reply:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"no ZooKeeper serving on port {port}")


def _client(port: int) -> KazooClient:
    zk = KazooClient(hosts=f"127.0.0.1:{port}", connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1})
    zk.start(timeout=30)
    return zk


def _start(port: int, data_dir: Path, log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115
    try:
        return subprocess.Popen([sys.executable, "-m", "ferry.cli", "zookeeper", "--port", str(port),
                                 "--data-dir", str(data_dir)], stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


@pytest.mark.slow
def test_foreground_server_persists_data(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "zk.log"
    proc = _start(port, tmp_path / "zk", log)
    try:
        _serving(port)
        zk = _client(port)
        zk.create("/ferry/hello", b"world", makepath=True)
        zk.stop()
        zk.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert (tmp_path / "zk" / "zoo.cfg").exists()
        assert f"serving 127.0.0.1:{port}" in log.read_text()

        proc = _start(port, tmp_path / "zk", log)
        _serving(port)
        zk = _client(port)
        assert zk.get("/ferry/hello")[0] == b"world"
        zk.stop()
        zk.close()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_port_in_use_is_a_clear_error(tmp_path: Path, zk_server) -> None:
    proc = subprocess.run([sys.executable, "-m", "ferry.cli", "zookeeper", "--port", str(zk_server.port),
                           "--data-dir", str(tmp_path / "zk")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1  # the environment's fault, not the flag's: a runtime error
    assert f"cannot listen on 127.0.0.1:{zk_server.port}" in proc.stderr
    assert "Traceback" not in proc.stderr
