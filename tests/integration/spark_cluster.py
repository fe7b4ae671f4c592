"""Helpers of the Spark-cluster integration test (test_spark_cluster.py): the offline cluster, PostgreSQL (the
Hive metastore), a Spark standalone master and two workers, and the Airflow host, as containers of the
project's images on one internal network (ferry-offline-<id>).

    offline-zk, offline-broker-1   ferry image: `ferry zookeeper`, `ferry broker` (plaintext, inside the network)
    metastore                      ferry-loader image: Debian's PostgreSQL (trust authentication inside the network)
    spark-master                   ferry-loader image: `spark-class ...deploy.master.Master` (the pinned PySpark's)
    spark-worker-1, -2             ferry-loader image: `spark-class ...deploy.worker.Worker` (1 core, 1 GB each)
    airflow                        ferry-loader image: Airflow + the DAGs (/opt/ferry/dags); the Spark driver runs
                                   here in client mode (spark-submit from SparkSubmitOperator)

The warehouse is one host directory mounted at the same path (/warehouse) in the driver's and both workers'
containers: the shared POSIX storage the loads need (docs/loaders.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ferry_datacenters import Datacenters
from ferry_docker_helpers import DockerError, docker

WAREHOUSE = "/warehouse"
MASTER = "spark://spark-master:7077"
SPARK_ROLES = ("spark-master", "spark-worker-1", "spark-worker-2")
WORKLOAD = (Path(__file__).parent / "spark_workload.py").read_bytes()
# Spark's daemons (master, worker) with small heaps: the executors get the memory
SPARK_ENV = {"SPARK_NO_DAEMONIZE": "1", "SPARK_DAEMON_MEMORY": "256m"}
AIRFLOW_ENV = {"AIRFLOW_HOME": "/var/lib/ferry/airflow", "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
               "AIRFLOW__CORE__DAGS_FOLDER": "/opt/ferry/dags", "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
               # the `spark` connection SparkSubmitOperator submits through: the standalone master, client mode
               "AIRFLOW_CONN_SPARK_CLUSTER": json.dumps({"conn_type": "spark", "host": "spark://spark-master",
                                                         "port": 7077, "extra": {"deploy-mode": "client"}})}
# PostgreSQL refuses to run as root: initdb and the server as the `postgres` user, trust inside the network
POSTGRES = ("set -e; D=/var/lib/postgresql/metastore; B=$(ls -d /usr/lib/postgresql/*/bin | tail -1); "
            "mkdir -p $D && chown postgres $D; "
            "su postgres -s /bin/sh -c \"$B/initdb -D $D -U ferry --auth=trust >/dev/null\"; "
            "echo 'host all all 0.0.0.0/0 trust' >> $D/pg_hba.conf; "
            "exec su postgres -s /bin/sh -c \"exec $B/postgres -D $D -c listen_addresses='*' "
            "-c unix_socket_directories=/tmp\"")


def start(dcs: Datacenters, role: str, image: str, command: list[str], *, env: dict[str, str] | None = None,
          warehouse: Path | None = None) -> None:
    """``role`` on the offline network, reachable there by its name; ``warehouse``: the host directory mounted
    at /warehouse."""
    from testcontainers.core.container import DockerContainer

    c = DockerContainer(image, name=dcs.names[role], hostname=role, labels={"org.ferry.test": dcs.run_id})
    c.with_command(command).with_env("PYTHONUNBUFFERED", "1")
    for k, v in (env or {}).items():
        c.with_env(k, v)
    if warehouse is not None:
        c.with_volume_mapping(str(warehouse), WAREHOUSE, "rw")
    c.with_network(dcs.network_objects["offline"]).with_network_aliases(role)
    c.start()
    dcs.containers[role] = c


def master_command() -> list[str]:
    return ["spark-class", "org.apache.spark.deploy.master.Master", "--host", "spark-master", "--port", "7077",
            "--webui-port", "8080"]


def worker_command(role: str) -> list[str]:
    return ["spark-class", "org.apache.spark.deploy.worker.Worker", MASTER, "--host", role, "--cores", "1",
            "--memory", "1g", "--webui-port", "8081"]


def run(dcs: Datacenters, role: str, *cmd: str, timeout: float = 300, stdin: bytes | None = None) -> str:
    """A command in ``role``'s container; its output, or DockerError with it unless it exits 0."""
    p = docker("exec", *(["-i"] if stdin is not None else []), dcs.names[role], *cmd, input=stdin,
               timeout=timeout, check=False)
    out = (p.stdout + p.stderr).decode(errors="replace")
    if p.returncode != 0:
        raise DockerError(f"{' '.join(cmd[:3])} in {role} failed (rc {p.returncode}):\n{out[-4000:]}")
    return p.stdout.decode(errors="replace")


def master_state(dcs: Datacenters) -> dict:
    """The master's JSON API (http://spark-master:8080/json), read from the Airflow host."""
    code = "import json,urllib.request;print(urllib.request.urlopen('http://spark-master:8080/json/',timeout=5).read().decode())"
    p = docker("exec", dcs.names["airflow"], "python", "-c", code, timeout=60, check=False)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {}


def wait_workers(dcs: Datacenters, n: int, timeout: float = 240) -> list[dict]:
    deadline = time.monotonic() + timeout
    alive: list[dict] = []
    while time.monotonic() < deadline:
        alive = [w for w in master_state(dcs).get("workers", []) if w.get("state") == "ALIVE"]
        if len(alive) >= n:
            return alive
        time.sleep(1)
    raise AssertionError(f"{len(alive)} of {n} Spark workers registered after {timeout:.0f}s\n"
                         + "".join(dcs.logs(r, 40) for r in SPARK_ROLES))


def wait_postgres(dcs: Datacenters, timeout: float = 240) -> None:
    """Until the server answers, then the metastore's database (its Hive schema is made by the first load)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = docker("exec", dcs.names["metastore"], "pg_isready", "-h", "127.0.0.1", "-U", "ferry", "-d", "postgres",
                   check=False)
        if p.returncode == 0:
            run(dcs, "metastore", "sh", "-c", "$(ls -d /usr/lib/postgresql/*/bin | tail -1)/createdb -h 127.0.0.1 "
                "-U ferry metastore", timeout=60)
            return
        time.sleep(0.5)
    raise AssertionError(f"PostgreSQL never answered\n{dcs.logs('metastore')}")
