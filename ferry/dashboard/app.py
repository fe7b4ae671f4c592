"""The dashboard's web application: JSON endpoints (documented in docs/dashboard.md), the pages that poll
them, and server-side SVG plots.

Every handler is a plain ``def``: FastAPI runs it in its thread pool, so a slow ZooKeeper stalls one
request, not the server. Bad input is answered as JSON ``{"error": ...}`` with 400 (an unknown topic: 404)
under ``/api/`` and ``/plot/``, and as an HTML 400/404 page elsewhere; an unexpected failure is a 500 with
one line, never a stack trace.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from ferry.client.audit.bucket import HOUR_MS, hour_start
from ferry.dashboard import pages
from ferry.dashboard.favicon import favicon_ico
from ferry.dashboard.metrics import registry_for
from ferry.dashboard.plots import flow_svg, lag_svg
from ferry.dashboard.sources import Sources

log = logging.getLogger("ferry.dashboard")
DEFAULT_HOURS = 48
MAX_HOURS = 24 * 62  # two months of hours in one grid: enough for any look back, bounded work per request


class BadInput(ValueError):
    """A query parameter or path the user got wrong (answered 400 / 404, never a stack trace)."""


def _parse_time(text: str, name: str) -> int:
    """An hour given as epoch milliseconds, ``YYYY-MM-DDTHH`` or ISO 8601 (UTC unless an offset is given)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text if len(text) != 13 else text + ":00")
    except ValueError:
        raise BadInput(f"{name}={text!r} is not a time (epoch ms, YYYY-MM-DDTHH or ISO 8601)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


def time_range(frm: str | None, to: str | None, default_hours: int = DEFAULT_HOURS) -> tuple[int, int]:
    """[from, to) in ms, aligned to hours; the default is the last ``default_hours`` hours, this one included."""
    now = int(time.time() * 1000)
    until = _parse_time(to, "to") if to else hour_start(now) + HOUR_MS
    since = _parse_time(frm, "from") if frm else until - default_hours * HOUR_MS
    since = hour_start(since)
    if until <= since:
        raise BadInput("the range is empty: 'to' must be after 'from'")
    if (until - since) // HOUR_MS > MAX_HOURS:
        raise BadInput(f"the range spans more than {MAX_HOURS} hours")
    return since, until


def create_app(sources: Sources, prometheus_url: str | None = None) -> FastAPI:
    """The application over ``sources`` (tests hand in their own)."""
    app = FastAPI(title="ferry dashboard", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.sources = sources

    @app.exception_handler(BadInput)
    def _bad_input(request: Request, exc: BadInput) -> Response:
        return _error(request, 400, str(exc))

    @app.exception_handler(StarletteHTTPException)
    def _http(request: Request, exc: StarletteHTTPException) -> Response:
        return _error(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    def _validation(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ()))
        return _error(request, 400, f"{where}: {first.get('msg', 'invalid input')}")

    @app.exception_handler(Exception)
    def _crash(request: Request, exc: Exception) -> Response:
        log.exception("dashboard request %s failed", request.url.path)
        return _error(request, 500, f"internal error: {type(exc).__name__}")

    # ---- JSON
    @app.get("/api/completeness")
    def api_grid(request: Request) -> dict[str, Any]:
        since, until = time_range(request.query_params.get("from"), request.query_params.get("to"))
        return sources.grid(since, until)

    @app.get("/api/completeness/{topic}/{hour}")
    def api_cell(topic: str, hour: str) -> dict[str, Any]:
        hour_ms = hour_start(_parse_time(hour, "hour"))
        cell = sources.cell(topic, hour_ms)
        if cell is None:
            raise StarletteHTTPException(404, f"no audit events for topic {topic!r}")
        return cell

    @app.get("/api/flow")
    def api_flow(request: Request) -> dict[str, Any]:
        since, until = time_range(request.query_params.get("from"), request.query_params.get("to"), 6)
        topic = request.query_params.get("topic") or None
        doc = sources.flow(topic, since, until)
        if topic and topic not in doc["topics"] and not doc["error"]:
            raise StarletteHTTPException(404, f"no audit events for topic {topic!r} in the range")
        return doc

    @app.get("/api/mirror")
    def api_mirror() -> dict[str, Any]:
        return sources.mirror()

    @app.get("/api/loads")
    def api_loads() -> dict[str, Any]:
        return sources.loads()

    @app.get("/api/clusters")
    def api_clusters() -> dict[str, Any]:
        return sources.clusters()

    # ---- plots (server-side SVG)
    @app.get("/plot/flow.svg")
    def plot_flow(request: Request) -> Response:
        since, until = time_range(request.query_params.get("from"), request.query_params.get("to"), 6)
        topic = request.query_params.get("topic") or ""
        if not topic:
            raise BadInput("topic=: which topic to plot")
        doc = sources.flow(topic, since, until)
        if topic not in doc["topics"] and not doc["error"]:
            raise StarletteHTTPException(404, f"no audit events for topic {topic!r} in the range")
        return Response(flow_svg(doc["topics"].get(topic, {}), since, until, topic), media_type="image/svg+xml")

    @app.get("/plot/lag.svg")
    def plot_lag() -> Response:
        return Response(lag_svg(list(sources.lag_history)), media_type="image/svg+xml")

    # ---- pages (a bad range in the page's URL is a 400 page; the shell itself reads no cluster)
    @app.get("/", response_class=HTMLResponse)
    def page_grid(request: Request) -> str:
        time_range(request.query_params.get("from"), request.query_params.get("to"))
        return pages.completeness_page(prometheus_url)

    @app.get("/flow", response_class=HTMLResponse)
    def page_flow(request: Request) -> str:
        time_range(request.query_params.get("from"), request.query_params.get("to"), 6)
        return pages.flow_page(prometheus_url)

    @app.get("/loads", response_class=HTMLResponse)
    def page_loads() -> str:
        return pages.loads_page(prometheus_url)

    @app.get("/clusters", response_class=HTMLResponse)
    def page_clusters() -> str:
        return pages.clusters_page(prometheus_url)

    registry = registry_for(sources)

    @app.get("/metrics")
    def metrics() -> Response:
        """Prometheus text format: the books' and the ledger's judgements (see ``ferry.dashboard.metrics``)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    icon = favicon_ico()

    @app.get("/favicon.ico")
    def favicon() -> Response:
        return Response(icon, media_type="image/x-icon", headers={"Cache-Control": "max-age=86400"})

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _error(request: Request, status: int, message: str) -> Response:
    """JSON for the API and the plots, an HTML page for people."""
    if request.url.path.startswith(("/api/", "/plot/")):
        return JSONResponse({"error": message, "status": status}, status_code=status)
    return HTMLResponse(pages.error_page(status, message), status_code=status)
