"""connections.max.idle.ms: a broker process closes a connection that has been silent too long with nothing
owed to it, keeps a busy one, and keeps one whose long-polling fetch is still parked."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from broker_wire import API_VERSIONS, FETCH, WireClient, api_versions, create_topic, fetch_body, leaders  # noqa: E402

IDLE_MS = 400


@pytest.fixture(scope="module")
def broker(zk_server, tmp_path_factory):
    from broker_wire import start_brokers

    _zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("idle"), 1,
                                 extra_args=("--connections-max-idle-ms", str(IDLE_MS)))
    yield brokers[0]
    for b in brokers:
        b.stop()


def closed_by_broker(c: WireClient) -> bool:
    """True when the broker has closed the connection (a request gets no answer, just EOF or a reset)."""
    try:
        c.send(API_VERSIONS, 0, b"")
        return c.recv() is None
    except OSError:
        return True


def test_an_idle_connection_is_closed(broker):
    with WireClient(broker.bootstrap) as c:
        assert api_versions(c)
        time.sleep(IDLE_MS / 1000 * 3)
        assert closed_by_broker(c)


def test_a_busy_connection_stays_open(broker):
    with WireClient(broker.bootstrap) as c:
        deadline = time.monotonic() + IDLE_MS / 1000 * 3
        while time.monotonic() < deadline:
            assert api_versions(c)
            time.sleep(IDLE_MS / 1000 / 4)
        assert api_versions(c)


def test_a_parked_fetch_is_not_idle(broker):
    with WireClient(broker.bootstrap) as c:
        create_topic(c, "idle-poll", 1)
        leaders(c, "idle-poll", 1)
        wait_ms = IDLE_MS * 3
        t0 = time.monotonic()
        c.send(FETCH, 11, fetch_body("idle-poll", 0, 0, max_wait_ms=wait_ms))
        got = c.recv()
        assert got is not None, "the broker closed a connection whose fetch was still parked"
        assert time.monotonic() - t0 >= wait_ms / 1000 * 0.9
