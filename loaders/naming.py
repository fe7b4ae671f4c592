"""Warehouse names (light: no PySpark import, so Airflow can parse DAG files quickly)."""

from __future__ import annotations

import re

AUDIT_TABLE = "ferry_audit"
COMPLETENESS_TABLE = "ferry_completeness"
VERSION_COLUMN = "ferry_run"  # an hour partition's version directory: dt=D/hr=H/ferry_run=<run id>


class NamingError(ValueError):
    pass


def table_for_topic(topic: str) -> str:
    """Hive table name of a topic (`page-views.v2` -> `page_views_v2`); `_audit` -> ferry_audit."""
    if topic == "_audit":
        return AUDIT_TABLE
    name = re.sub(r"[^0-9A-Za-z_]", "_", topic).lower().strip("_") or "topic"
    if name[0].isdigit():
        name = "t_" + name
    if name in (AUDIT_TABLE, COMPLETENESS_TABLE):
        raise NamingError(f"topic {topic!r} would be stored in ferry's own table {name!r}; rename the topic")
    return name
