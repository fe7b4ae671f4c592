"""Airflow runs against a throw-away AIRFLOW_HOME (SQLite), set before anything imports airflow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"
_HOME = tempfile.mkdtemp(prefix="ferry-airflow-home-")
os.environ["AIRFLOW_HOME"] = _HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["AIRFLOW__LOGGING__BASE_LOG_FOLDER"] = str(Path(_HOME) / "logs")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
if str(DAGS) not in sys.path:
    sys.path.insert(0, str(DAGS))


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """`airflow db migrate` once per test session (SQLite under the temporary AIRFLOW_HOME)."""
    airflow = str(Path(sys.executable).with_name("airflow"))
    proc = subprocess.run([airflow, "db", "migrate"], env=dict(os.environ), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield _HOME
    shutil.rmtree(_HOME, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _stop_spark_at_exit():
    """A DAG run leaves the in-process Spark session up (as a worker process would until it exits)."""
    yield
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if session is not None:
        session.stop()
