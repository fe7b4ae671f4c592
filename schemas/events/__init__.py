"""The demo's activity events (LinkedIn-style page views, clicks and searches) and a generator of
realistic-looking ones. Every event has ``event_time`` (timestamp-millis), ``host`` and ``member_id``."""

from __future__ import annotations

import json
import random
import socket
import time
import uuid
from pathlib import Path
from typing import Any

EVENTS_DIR = Path(__file__).resolve().parent
EVENT_NAMES = ("page_view", "click", "search")


def schema_path(name: str) -> Path:
    if name not in EVENT_NAMES:
        raise KeyError(f"no event schema {name!r} (choose from {', '.join(EVENT_NAMES)})")
    return EVENTS_DIR / f"{name}.avsc"


def load(name: str) -> dict[str, Any]:
    """The schema of event ``name`` as JSON (a dict)."""
    return json.loads(schema_path(name).read_text())


_PAGES = ("feed", "profile", "jobs_home", "messaging", "notifications", "company", "search_results")
_CODES = ("nav_profile", "nav_jobs", "pymk_connect", "feed_like", "feed_comment", "job_apply", "ad_click")
_QUERIES = ("data engineer", "kafka", "product manager", "hadoop", "machine learning", "recruiter",
            "linkedin", "software engineer remote", "sales director", "nurse")
_VERTICALS = ("ALL", "PEOPLE", "JOBS", "COMPANIES", "GROUPS", "CONTENT")


def sample(name: str, rng: random.Random | None = None, event_time_ms: int | None = None,
           host: str | None = None) -> dict[str, Any]:
    """One plausible event of type ``name`` (a dict matching its schema)."""
    rng = rng or random.Random()
    common: dict[str, Any] = {
        "event_time": int(time.time() * 1000) if event_time_ms is None else int(event_time_ms),
        "host": host or socket.gethostname(),
        "guid": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "member_id": None if rng.random() < 0.1 else rng.randrange(1, 200_000_000),
        "session_id": f"s{rng.getrandbits(48):012x}",
    }
    if name == "page_view":
        page = rng.choice(_PAGES)
        return {**common, "page": page, "path": f"/{page.replace('_', '/')}",
                "referrer": rng.choice((None, "https://www.google.com/", "https://www.linkedin.com/feed/")),
                "user_agent": "Mozilla/5.0", "locale": rng.choice(("en_US", "de_DE", "fr_FR")),
                "response_ms": rng.randrange(20, 900)}
    if name == "click":
        code = rng.choice(_CODES)
        return {**common, "page": rng.choice(_PAGES), "tracking_code": code,
                "target_url": f"https://www.linkedin.com/{code}", "position": rng.choice((None, rng.randrange(10))),
                "view_guid": None}
    if name == "search":
        count = rng.randrange(0, 50_000)
        return {**common, "page": "search_results", "query": rng.choice(_QUERIES),
                "vertical": rng.choice(_VERTICALS), "page_number": rng.randrange(1, 4), "result_count": count,
                "result_ids": [rng.randrange(1, 10**9) for _ in range(min(count, 10))],
                "latency_ms": rng.randrange(5, 400)}
    raise KeyError(f"no event schema {name!r} (choose from {', '.join(EVENT_NAMES)})")
