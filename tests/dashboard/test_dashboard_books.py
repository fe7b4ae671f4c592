"""The dashboard's grid, drill-down and flow over made-up audit events (no cluster): the colours follow
``ferry.audit.completeness``, duplicates are told apart, hosts are broken out, ranges are parsed strictly."""

from __future__ import annotations

import time

from fastapi.testclient import TestClient

from ferry.client.audit.bucket import BUCKET_MS, HOUR_MS, hour_start
from ferry.client.audit.event import AuditEvent
from ferry.dashboard.app import create_app, time_range
from ferry.dashboard.sources import AuditSnapshot, Sources

H = hour_start(int(time.time() * 1000)) - 3 * HOUR_MS


def ev(topic: str, tier: str, bucket: int, n: int, host: str) -> AuditEvent:
    return AuditEvent.new(topic, tier, bucket, n, host=host, datacenter="live", application="web", time_ms=bucket)


class FakeSources(Sources):
    def __init__(self, events: list[AuditEvent], unreachable: list[str] | None = None) -> None:
        super().__init__("zk:1/offline", ["zk:1/live"], None, ttl_s=0)
        self.snap = AuditSnapshot(events=events, unreachable=unreachable or [], read_at=time.time())

    def audit(self) -> AuditSnapshot:
        return self.snap


EVENTS = [
    ev("views", "producer", H, 10, "web-1"), ev("views", "producer", H, 5, "web-2"),
    ev("views", "warehouse", H, 15, "loader"),                                       # H: complete
    ev("views", "producer", H + HOUR_MS, 10, "web-1"), ev("views", "warehouse", H + HOUR_MS, 12, "loader"),
    ev("views", "producer", H + 2 * HOUR_MS + BUCKET_MS, 9, "web-1"),                  # H+2: nothing loaded
    ev("views", "warehouse", H + 2 * HOUR_MS + BUCKET_MS, 8, "loader"),
]


def test_grid_colours_follow_the_books():
    client = TestClient(create_app(FakeSources(EVENTS)))
    d = client.get("/api/completeness").json()
    assert len(d["hours"]) == 48 and d["topics"] == ["views"]
    cells = d["cells"]["views"]
    got = [(cells[str(H + i * HOUR_MS)]["status"], cells[str(H + i * HOUR_MS)]["colour"]) for i in range(4)]
    assert got == [("complete", "complete"), ("incomplete", "duplicates"), ("incomplete", "incomplete"),
                   ("empty", "empty")]
    assert cells[str(H + HOUR_MS)]["duplicates"] == 2 and cells[str(H + 2 * HOUR_MS)]["missing"] == 1

    cell = client.get(f"/api/completeness/views/{H}").json()
    assert cell["buckets"][0]["hosts"] == {"producer": {"web-1": 10, "web-2": 5}, "warehouse": {"loader": 15}}
    assert [b["tiers"] for b in cell["buckets"][1:]] == [{}] * 5


    flow = client.get(f"/api/flow?from={H}&to={H + 3 * HOUR_MS}").json()
    assert flow["topics"]["views"]["warehouse"] == {str(H): 15, str(H + HOUR_MS): 12,
                                                    str(H + 2 * HOUR_MS + BUCKET_MS): 8}
    assert client.get(f"/plot/flow.svg?topic=views&from={H}").text.startswith("<svg")
    assert client.get("/api/flow?topic=nope").status_code == 404



def test_a_host_with_several_producing_applications_is_broken_down_by_application():
    events = [AuditEvent.new("views", "producer", H, n, host="vm", datacenter="live", application=app, time_ms=H)
              for app, n in (("fe-1", 3), ("fe-2", 4))] + [ev("views", "warehouse", H, 7, "loader")]
    cell = TestClient(create_app(FakeSources(events))).get(f"/api/completeness/views/{H}").json()
    assert cell["buckets"][0]["hosts"] == {"producer": {"vm/fe-1": 3, "vm/fe-2": 4}, "warehouse": {"loader": 7}}

def test_an_unreachable_live_cluster_makes_every_hour_unknown():
    client = TestClient(create_app(FakeSources(EVENTS, unreachable=["zk:1/live"])))
    d = client.get(f"/api/completeness?from={H}&to={H + 2 * HOUR_MS}").json()
    assert {c["status"] for c in d["cells"]["views"].values()} == {"unknown"}
    assert d["unreachable"] == ["zk:1/live"]


def test_time_ranges():
    assert time_range("2024-05-01T10", "2024-05-01T12") == (1714557600000, 1714564800000)
    assert time_range("2024-05-01T10:30:00+00:00", "1714564800000") == (1714557600000, 1714564800000)
    since, until = time_range(None, None)
    assert (until - since) == 48 * HOUR_MS and until > time.time() * 1000
    client = TestClient(create_app(FakeSources([])))
    for q in ("from=soon", "to=2024-13-01", "from=2024-05-01T12&to=2024-05-01T10"):
        r = client.get("/api/completeness?" + q)
        assert r.status_code == 400 and set(r.json()) == {"error", "status"}, q
    assert client.get("/nope").status_code == 404
    for page in ("/?from=soon", "/flow?to=2024-13-01"):  # a bad range in a page's URL: a 400 page, no trace
        r = client.get(page)
        assert r.status_code == 400 and r.headers["content-type"].startswith("text/html") and "Traceback" not in r.text
    assert client.get("/plot/flow.svg").status_code == 400


def test_unknown_topics_are_404():
    client = TestClient(create_app(FakeSources(EVENTS)))
    for url in ("/api/completeness/nope/" + str(H), "/api/flow?topic=nope", "/plot/flow.svg?topic=nope"):
        r = client.get(url)
        assert r.status_code == 404 and r.json() == {"error": "no audit events for topic 'nope'" + (
            "" if "completeness" in url else " in the range"), "status": 404}, url
    assert client.get("/plot/flow.svg?topic=views").status_code == 200


def test_pages_link_to_prometheus_when_given():
    client = TestClient(create_app(FakeSources([]), prometheus_url="http://loader-1:9090/"))
    for page in ("/", "/flow", "/loads", "/clusters"):
        assert '<a href="http://loader-1:9090/">Prometheus</a>' in client.get(page).text, page
    assert "Prometheus</a>" not in TestClient(create_app(FakeSources([]))).get("/").text


def test_the_dashboard_has_an_icon():
    """Every page links its icon inline and /favicon.ico answers (a browser asks for it on any URL it opens,
    a JSON endpoint too): no 404 in the browser's console."""
    client = TestClient(create_app(FakeSources([])))
    r = client.get("/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"] == "image/x-icon"
    assert r.content[:4] == b"\0\0\1\0" and len(r.content) > 6 + 16 + 40  # an ICO holding one image
    for page in ("/", "/flow", "/loads", "/clusters", "/nope"):
        assert '<link rel=icon type="image/svg+xml" href="data:image/svg+xml,' in client.get(page).text, page
