"""Airflow DAG file: one hourly ferry warehouse-load DAG per topic group of ``ferry_dags.yaml``
(or of the file named by $FERRY_DAGS_CONFIG). See ferry_dag_factory.py and docs/dags.md."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # the factory lives next to this file (Airflow puts the dags folder on sys.path too)
    sys.path.insert(0, _HERE)

from ferry_dag_factory import build_all  # noqa: E402

globals().update(build_all())
