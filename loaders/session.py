"""The Spark session of a load: Hive support with the metastore named by ``--metastore``/$FERRY_METASTORE
(PostgreSQL, a metastore service, or by default the embedded Derby under the state directory: see
sql_metastore.py), UTC session time zone, and the ``ferry`` data source registered."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ferry.loaders.sql_metastore import parse

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("ferry.load.session")


def python_for_workers() -> str:
    """Executors must run this interpreter (the one with pyarrow, fastavro and ferry installed)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return os.environ["PYSPARK_PYTHON"]


# The driver JVM of a load whose executors write Parquet themselves does no row work: its CPU goes to the
# JIT compilers warming up (measured: C2 ~45% of the JVM's CPU in a run, and a fresh JVM's first run spends
# 15 s of CPU on 2 cores). C1 alone halves the JVM's CPU per run and the first run's time; rows written by
# Spark's own writer (parquet_writer=spark) want C2, so they keep the default.
QUICK_JIT = "-XX:TieredStopAtLevel=1"


def build_session(state_dir: str | os.PathLike, *, master: str | None = "local[2]", warehouse: str | None = None,
                  metastore_uris: str | None = None, app_name: str = "ferry-load",
                  conf: dict[str, str] | None = None, quick_jit: bool = False) -> SparkSession:
    """getOrCreate a Hive-enabled session. With ``master=None`` the master comes from spark-submit.

    Static settings (metastore, warehouse dir, JVM options) only take effect when this creates the
    session; an existing session in the process is reused as it is (the caller decided its metastore).
    ``quick_jit``: the driver JVM compiles with C1 only (QUICK_JIT; for loads whose rows never enter it).
    ``metastore_uris``: any metastore spec of sql_metastore.parse (postgresql://, thrift://, derby:DIR); None:
    $FERRY_METASTORE, else the embedded Derby under ``state_dir``. A metastore that cannot be used raises
    sql_metastore.MetastoreError (one line) before any JVM starts.
    """
    python_for_workers()
    # pyspark, and the ferry data source (a pyspark class), when a session is made: `ferry sql` imports this
    # module for python_for_workers alone and runs pyspark's own programs
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from ferry.loaders.datasource import register  # a pyspark class: only once a session is built

    state = Path(state_dir).resolve()
    state.mkdir(parents=True, exist_ok=True)
    active = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if active is not None and active.sparkContext._jsc is not None:
        register(active)
        return active
    metastore = parse(metastore_uris, state)
    if metastore.kind != "derby" or SparkContext._gateway is None:  # our own JVM may hold Derby: let it be
        metastore.check()
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": warehouse or str(state / "warehouse"),
        # a cluster's driver keeps its UI: its REST API is where a load reads its tasks per executor
        # (executor_report.py) and where ops watch it; local mode needs neither
        "spark.ui.enabled": "false" if (master or "").startswith("local") else "true",
        "spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false",  # stage bars on a terminal
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.hadoop.hive.exec.dynamic.partition.mode": "nonstrict",
        "spark.sql.parquet.compression.codec": "snappy",
        "spark.local.dir": str(state / "spark-tmp"),
        "spark.python.worker.reuse": "true",
        "spark.hadoop.hive.stats.autogather": "false",
        **metastore.spark_conf(state),
    }
    if quick_jit:
        java = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{java} {QUICK_JIT}".strip()
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.enableHiveSupport().getOrCreate()
    if metastore.kind == "derby":  # under spark-submit the driver JVM started before our settings: derby.log goes here
        spark._jvm.java.lang.System.setProperty("derby.system.home", str(state))
    spark.sparkContext.setLogLevel(os.environ.get("FERRY_SPARK_LOG_LEVEL", "WARN"))
    register(spark)
    return spark
