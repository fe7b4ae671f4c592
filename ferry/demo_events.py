"""A realistic activity stream for the demo: page views, clicks and searches from several frontend hosts.

Event times are spread over the last few hours (as a frontend fleet's logs would be), members browse in
sessions, pages follow a skewed popularity (a few pages get most views). Seeded, so a run is repeatable.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

PAGES = [("feed", "/feed"), ("profile", "/in/{member}"), ("jobs_home", "/jobs"), ("job_view", "/jobs/view/{n}"),
         ("search_results", "/search/results"), ("messaging", "/messaging"), ("notifications", "/notifications"),
         ("company", "/company/{n}"), ("groups", "/groups/{n}"), ("settings", "/settings")]
QUERIES = ["software engineer", "data scientist", "product manager", "kafka", "hadoop", "recruiter",
           "sales", "marketing", "machine learning", "distributed systems"]
ELEMENTS = ["connect_button", "like", "comment", "share", "job_apply", "follow", "message", "nav_home"]
VERTICALS = ["ALL", "PEOPLE", "JOBS", "COMPANIES", "GROUPS", "CONTENT"]
LOCALES = ["en_US", "en_GB", "de_DE", "fr_FR", "pt_BR", "hi_IN"]
AGENTS = ["Mozilla/5.0 (Macintosh)", "Mozilla/5.0 (Windows NT 10.0)", "Mozilla/5.0 (iPhone)", "Mozilla/5.0 (X11)"]


@dataclass(frozen=True)
class Event:
    topic: str
    key: bytes
    record: dict
    event_time_ms: int


def _zipf_choice(rng: random.Random, items: list, s: float = 1.1):
    weights = [1.0 / (i + 1) ** s for i in range(len(items))]
    return rng.choices(items, weights)[0]


def activity_stream(n_events: int, start_ms: int, end_ms: int, hosts: list[str], seed: int = 2011
                    ) -> Iterator[Event]:
    """`n_events` events with event times in [start_ms, end_ms), about 70% page views, 20% clicks, 10% searches."""
    rng = random.Random(seed)
    span = max(end_ms - start_ms, 1)
    for _ in range(n_events):
        t = start_ms + rng.randrange(span)
        host = rng.choice(hosts)
        member = rng.choice([None, rng.randrange(1, 50_000)]) if rng.random() < 0.2 else rng.randrange(1, 50_000)
        session = f"s{(member or rng.randrange(10**6)) % 9973:04d}-{t // 1_800_000}"
        page, path = _zipf_choice(rng, PAGES)
        path = path.format(member=f"m{member or 0}", n=rng.randrange(1, 500))
        key = str(member or session).encode()
        r = rng.random()
        guid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        if r < 0.7:
            yield Event("page_view", key, {
                "event_time": t, "host": host, "guid": guid, "member_id": member, "session_id": session,
                "page": page, "path": path, "referrer": rng.choice([None, "https://www.google.com/", "/feed"]),
                "user_agent": rng.choice(AGENTS), "locale": rng.choice(LOCALES),
                "response_ms": int(rng.lognormvariate(3.5, 0.6))}, t)
        elif r < 0.9:
            yield Event("click", key, _fit_click(rng, t, host, guid, member, session, page), t)
        else:
            yield Event("search", key, _fit_search(rng, t, host, guid, member, session), t)


def _fit_click(rng: random.Random, t: int, host: str, guid: str, member, session: str, page: str) -> dict:
    return {"event_time": t, "host": host, "guid": guid, "member_id": member, "session_id": session,
            "page": page, "tracking_code": rng.choice(ELEMENTS),
            "target_url": f"/{rng.choice(ELEMENTS)}/{rng.randrange(999)}",
            "position": rng.choice([None, rng.randrange(0, 20)]), "view_guid": None}


def _fit_search(rng: random.Random, t: int, host: str, guid: str, member, session: str) -> dict:
    return {"event_time": t, "host": host, "guid": guid, "member_id": member, "session_id": session,
            "page": "search_results", "query": _zipf_choice(rng, QUERIES), "vertical": rng.choice(VERTICALS),
            "page_number": 1 + int(rng.expovariate(2.0)), "result_count": rng.randrange(0, 100_000),
            "result_ids": [rng.randrange(1, 10**6) for _ in range(rng.randrange(0, 5))],
            "latency_ms": int(rng.lognormvariate(4.0, 0.5))}
