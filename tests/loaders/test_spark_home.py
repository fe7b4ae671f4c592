"""Where the metastore's schema tool finds Spark's jars when the driver runs under spark-submit (the DAG's
SparkSubmitOperator): spark-submit puts ``python/lib/pyspark.zip`` first on the driver's path, so pyspark's
``__file__`` has no jars beside it; $SPARK_HOME (which spark-submit sets) has them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

PYSPARK = Path(pyspark.__file__).resolve().parent
CODE = ("import pyspark; from ferry.loaders.sql_metastore import spark_jars_dir; "
        "print(pyspark.__file__); print(next(spark_jars_dir().glob('hive-metastore-*.jar'), 'NONE'))")


def _driver(env: dict[str, str]) -> list[str]:
    zip_path = PYSPARK / "python" / "lib" / "pyspark.zip"
    assert zip_path.is_file(), zip_path
    env = dict(os.environ, **env, PYTHONPATH=f"{zip_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.split()


def test_jars_found_under_spark_submit_from_spark_home():
    imported_from, jar = _driver({"SPARK_HOME": str(PYSPARK)})
    assert "pyspark.zip" in imported_from  # as under spark-submit
    assert jar != "NONE" and Path(jar).is_file(), jar


def test_a_spark_home_without_jars_is_not_taken(tmp_path: Path):
    _, jar = _driver({"SPARK_HOME": str(tmp_path)})
    assert jar == "NONE"  # pyspark imported from the zip: the same failure as before, named by the schema tool
