"""`ferry demo --short --secure` (docs/demo.md "Secured"): TLS + SCRAM + ACLs end to end. While it keeps running:
the books balanced over SASL_SSL, an anonymous client is refused on both listeners (authorization errors on the
loopback PLAINTEXT one, no login on SASL_SSL), and no password is in the process list, the demo's output or its
processes' logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

pytestmark = pytest.mark.slow


def _anonymous_send(bootstrap: str, extra: dict[str, str]) -> KafkaError | None:
    """The delivery error of one message sent with no credentials (None if it was accepted)."""
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 15000, "retries": 0,
                         "socket.timeout.ms": 10000, **extra})
    producer.produce("page_view", b"anonymous", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    return errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT)


@pytest.mark.timeout(1800)
def test_demo_short_secure(tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    env.pop("FERRY_METASTORE", None)
    env.pop("FERRY_CLIENT_CONFIG", None)
    demo_dir = tmp_path / "demo"
    log = tmp_path / "demo.out"
    with open(log, "w") as out:
        demo = subprocess.Popen([sys.executable, "-m", "ferry.cli", "demo", "--short", "--secure", "--keep-running",
                                 "--dir", str(demo_dir), "--dashboard-listen", "127.0.0.1:0", "--seed", "11"],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 1500
        while "everything is still running" not in log.read_text():
            assert demo.poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, "the secured demo did not finish within 1500 s"
            time.sleep(2)
        text = log.read_text()
        assert "every hour complete: yes" in text, text[-4000:]
        report = json.loads((demo_dir / "last-report.json").read_text())
        books = report["books"]
        assert len(books) == 3 * 2 and all(b["complete"] and b["duplicates"] == 0 for b in books)
        assert sum(b["produced"] for b in books) == 3000 == sum(b["loaded"] for b in books)
        # the mirror link's counts reached the offline `_audit` over SASL_SSL as the offline broker's own user
        assert all(b["mirrored"] == b["produced"] for b in books), books
        assert report["mirror"]["kind"] == "link" and report["mirror"]["state"] == "running", report["mirror"]

        ports = json.loads((demo_dir / "ports.json").read_text())
        # anonymous on the loopback PLAINTEXT listener: the authorizer refuses it
        err = _anonymous_send(f"127.0.0.1:{ports['live-1']}", {})
        assert err is not None and err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                                  KafkaError.CLUSTER_AUTHORIZATION_FAILED,
                                                  KafkaError._MSG_TIMED_OUT), err
        # on SASL_SSL: TLS verified against the demo's CA, but an unknown user cannot log in
        err = _anonymous_send(f"127.0.0.1:{ports['live-1-sasl']}", {
            "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "nobody",
            "sasl.password": "wrong", "ssl.ca.location": str(demo_dir / "security" / "ca.pem")})
        assert err is not None, "an unknown user could produce"
        # a frontend's own settings work (the refusals above are the ACLs', not a broken listener)
        props = dict(line.split("=", 1) for line in (demo_dir / "security" / "clients" / "live-frontend.properties")
                     .read_text().splitlines() if "=" in line and not line.startswith("#"))
        assert _anonymous_send(f"127.0.0.1:{ports['live-1-sasl']}", props) is None

        passwords = [dict(line.split("=", 1) for line in f.read_text().splitlines() if "=" in line)["sasl.password"]
                     for f in (demo_dir / "security" / "clients").glob("*.properties")]
        assert len(passwords) == 6
        for f in (demo_dir / "security" / "clients").glob("*.properties"):
            assert f.stat().st_mode & 0o077 == 0, f
        ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, timeout=30).stdout
        assert "--secure" in ps and not [p for p in passwords if p in ps]
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(120)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait()
    outputs = [log.read_text(), *(p.read_text(errors="replace") for p in demo_dir.rglob("*.out"))]
    assert not [p for p in passwords for o in outputs if p in o]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo", "demo.out"]  # nothing stray in the cwd
