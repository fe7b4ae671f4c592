"""The broker's per-API request metrics, scraped over HTTP from a real broker process started with
--metrics-listen: requests, bytes in and out and failed requests per API, produce and fetch bytes per topic."""

from __future__ import annotations

import os
import socket
import struct
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ferry.client.producer import Producer
from ferry.client.simple_consumer import SimpleConsumer
from ferry.zk.local_process import free_port
from tests.client.conftest import create_topic


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _value(samples: dict, name: str, **labels: str) -> float:
    return sum(v for (n, lab), v in samples.items() if n == name and set(labels.items()) <= set(lab))


@pytest.mark.slow  # a broker process
def test_requests_bytes_and_errors_per_api_and_topic(cluster_factory):
    port = free_port()
    cluster = cluster_factory(n_brokers=1, extra_args=("--metrics-listen", f"127.0.0.1:{port}",
                                                       "--audit-topic-partitions", "1"))
    create_topic(cluster.zk_connect, "metered", 1)
    producer = Producer(cluster.bootstrap, None, audit=False, compression="none")
    for i in range(20):
        producer.send("metered", os.urandom(100), str(i).encode())
    assert producer.close(30) == 0
    with SimpleConsumer(cluster.bootstrap) as c:
        assert sum(1 for _ in c.read("metered", "earliest", until_end=True)) == 20

    s = _scrape(port)
    assert _value(s, "ferry_broker_requests_total", api="Produce") >= 1
    assert _value(s, "ferry_broker_requests_total", api="Fetch") >= 1
    assert _value(s, "ferry_broker_requests_total", api="Metadata") >= 1
    assert _value(s, "ferry_broker_request_bytes_total", api="Produce") > 2000  # 20 values of 100 bytes
    assert _value(s, "ferry_broker_response_bytes_total", api="Fetch") > 2000
    assert _value(s, "ferry_broker_topic_bytes_in_total", topic="metered") > 2000
    assert _value(s, "ferry_broker_topic_bytes_out_total", topic="metered") > 2000

    # an unknown API key closes the connection and counts as an error of that key
    host, p = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(p)), timeout=5) as sock:
        body = struct.pack(">hhih", 99, 0, 7, -1)
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(10) == b""  # closed, no answer
    deadline = time.monotonic() + 10
    while _value(_scrape(port), "ferry_broker_request_errors_total", api="99") < 1:
        assert time.monotonic() < deadline, "the failed request was not counted"
        time.sleep(0.1)
