"""The spark role on container hosts, for real: spark.yml deploys a Spark standalone master (on the loader host)
and two workers (a worker host and the loader host itself) as systemd units from the PySpark in ferry's
virtualenv, next to an offline ZooKeeper and broker; a `ferry load --master spark://...` on the loader host then
runs its splits on both workers' executors, which write into the warehouse volume both hosts mount at the same
path. Checked: the units are active, the master lists both workers ALIVE with the inventory's cores and memory,
its recovery directory holds them (FILESYSTEM recovery), the REST submission port is closed, the load commits
every row once (counted again by a separate Spark session), and a second spark.yml run changes nothing.
Plain brokers (``ferry_security: plaintext``): the spark role needs no certificates."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ferry_docker_helpers import ROOT, DockerHosts, build_images, docker, docker_or_skip

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ANSIBLE_DIR = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
WAREHOUSE = "/var/lib/ferry/warehouse"
LOADER, WORKER = "offline-loader-1", "offline-spark-1"
# inventory host -> (groups, image key); all on the offline network
HOSTS = {
    "offline-zk-1": (["offline_zookeeper"], "FERRY_BASE_IMAGE"),
    "offline-broker-1": (["offline_brokers"], "FERRY_BASE_IMAGE"),
    LOADER: (["loader", "spark_workers"], "FERRY_WAREHOUSE_BASE_IMAGE"),
    WORKER: (["spark_workers"], "FERRY_WAREHOUSE_BASE_IMAGE"),
}
PRODUCE = b"""\
import sys, time
from ferry.client.producer import Producer
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroSerializer
from ferry.zk.cluster_registry import ClusterRegistry
zk, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reg = ClusterRegistry(zk).start()
try:
    reg.create_topic(topic, 4, {}, replication_factor=1)
finally:
    reg.stop()
schema = '{"type": "record", "name": "SparkCheck", "namespace": "ferry.test", "fields": [{"name": "n", "type": "long"}]}'
hour = (int(time.time()) // 3600 - 2) * 3_600_000
with SchemaRegistry(zk) as sr:
    sr.register(subject_for_topic(topic), schema)
    ser = AvroSerializer(sr, subject_for_topic(topic))
    producer = Producer(zookeeper=zk, application="sparkcheck", audit_interval_s=1.0)
    for i in range(n):
        producer.send(topic, ser.serialize({"n": i}), None, partition=i % 4, timestamp_ms=hour + 100 * i)
    assert producer.close() == 0
print("produced", n)
"""
COUNT = b"""\
import json, sys
from ferry.loaders.session import build_session
spark = build_session(sys.argv[1], master="local[1]", warehouse=sys.argv[2])
r = spark.sql(f"SELECT count(*) AS n, count(DISTINCT _partition, _offset) AS d FROM {sys.argv[3]}").collect()[0]
print("RESULT " + json.dumps({"rows": r.n, "distinct": r.d}))
"""


def write_inventory(path: Path, hosts: DockerHosts) -> None:
    groups: dict[str, dict] = {g: {"hosts": {}} for g in ("offline_zookeeper", "offline_brokers", "loader",
                                                           "spark_workers")}
    for host, (names, _) in HOSTS.items():
        for g in names:
            groups[g]["hosts"][host] = {"ansible_host": hosts.name(host),
                                        **({"ferry_broker_id": 1} if g == "offline_brokers" else {})}
    inventory = {"all": {
        "vars": {"ansible_connection": "ferry_docker", "ansible_python_interpreter": "/usr/bin/python3",
                 "ferry_security": "plaintext", "spark_worker_cores": 1, "spark_worker_memory": "1g"},
        "children": {
            "offline": {"children": groups},
            "live": {"children": {"live_zookeeper": {"hosts": {}}, "live_brokers": {"hosts": {}}}},
            "zookeeper": {"children": {"offline_zookeeper": {}}},
            "brokers": {"children": {"offline_brokers": {}}},
        }}}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))


def playbook(inventory: Path, log_dir: Path, name: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{VENV_BIN}:{os.environ['PATH']}")
    t0 = time.monotonic()
    p = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
                        # extra vars: the playbooks' group_vars/all.yml (sasl_ssl) outranks an inventory's vars
                        "-e", "ferry_security=plaintext", name], cwd=ANSIBLE_DIR, env=env,
                       capture_output=True, text=True, timeout=timeout)
    log = log_dir / f"{Path(name).stem}-{int(t0)}.log"
    log.write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
    print(f"[ansible] {name}: rc={p.returncode} in {time.monotonic() - t0:.1f}s (log {log})")
    return p


@pytest.fixture(scope="module")
def spark_deployment(tmp_path_factory: pytest.TempPathFactory):
    docker_or_skip()
    images = build_images("base", "wheels", "warehouse")
    hosts = DockerHosts()
    volume = f"ferry-warehouse-{hosts.run_id}"
    docker("volume", "create", "--label", hosts.label, volume)
    try:
        net = hosts.network("ferry-offline")
        for host, (names, image) in HOSTS.items():
            extra = ["-v", f"{volume}:{WAREHOUSE}"] if "spark_workers" in names else []
            hosts.run(host, images[image], [net], systemd=True, extra=extra)
        for host in HOSTS:
            hosts.wait_systemd(host)
        tmp = tmp_path_factory.mktemp("ansible-spark")
        inventory = tmp / "hosts.yml"
        write_inventory(inventory, hosts)
        for name in ("zookeeper.yml", "brokers.yml", "spark.yml"):
            p = playbook(inventory, tmp, name)
            assert p.returncode == 0, f"{name}:\n" + p.stdout[-6000:] + p.stderr[-3000:]
        yield {"hosts": hosts, "inventory": inventory, "tmp": tmp}
    finally:
        hosts.cleanup()
        docker("volume", "rm", "-f", volume, check=False)


def _as_ferry(hosts: DockerHosts, command: str, timeout: float = 600, stdin: bytes | None = None) -> str:
    p = hosts.exec(LOADER, "su", "-s", "/bin/sh", "ferry", "-c", "cd /tmp; PATH=/opt/ferry/venv/bin:$PATH " + command,
                   timeout=timeout, check=False, input=stdin)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert p.returncode == 0, f"{command}: rc={p.returncode}\n{out[-4000:]}"
    return out


def _python(hosts: DockerHosts, code: str) -> str:
    p = hosts.exec(LOADER, "/opt/ferry/venv/bin/python", "-c", code, check=False)
    assert p.returncode == 0, (p.stdout + p.stderr).decode(errors="replace")[-3000:]
    return p.stdout.decode()


def test_spark_role_runs_a_load_on_both_workers(spark_deployment) -> None:
    hosts: DockerHosts = spark_deployment["hosts"]
    for host, unit in ((LOADER, "ferry-spark-master"), (LOADER, "ferry-spark-worker"), (WORKER, "ferry-spark-worker")):
        state = hosts.exec(host, "systemctl", "is-active", unit, check=False).stdout.decode().strip()
        assert state == "active", f"{unit} on {host}: {state}"
    master = json.loads(_python(hosts, f"import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                                       f"'http://{LOADER}:8090/json/', timeout=10).read().decode())"))
    alive = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert sorted(w["host"] for w in alive) == sorted([LOADER, WORKER]), master["workers"]
    assert all(w["cores"] == 1 and w["memory"] == 1024 for w in alive), alive
    recovery = hosts.exec(LOADER, "ls", "/var/lib/ferry/spark/recovery").stdout.decode().split()
    assert sum(f.startswith("worker_") for f in recovery) == 2, recovery
    refused = _python(hosts, f"import socket\ntry:\n    socket.create_connection(('{LOADER}', 6066), 5)\n"
                             "except ConnectionRefusedError:\n    print('refused')")
    assert refused.strip() == "refused", "the REST submission server must be off"

    zk = "offline-zk-1:2181/ferry/offline"
    n = 4000
    assert f"produced {n}" in _as_ferry(hosts, f"python - {zk} sparkcheck {n}", stdin=PRODUCE)
    out = _as_ferry(hosts, f"ferry load --zookeeper {zk} --topics sparkcheck --state-dir /tmp/sc-state "
                           f"--warehouse {WAREHOUSE} --database sc --max-per-split 250 --no-audit "
                           f"--master spark://{LOADER}:7077 --json /tmp/sc.json "
                           f"--conf spark.driver.host={LOADER} --conf spark.executor.memory=512m "
                           "--conf spark.driver.memory=512m --conf spark.scheduler.minRegisteredResourcesRatio=1.0 "
                           "--conf spark.ui.showConsoleProgress=false", timeout=900)
    result = json.loads(hosts.exec(LOADER, "cat", "/tmp/sc.json").stdout)
    assert result["committed"] and result["rows"] == n, out[-3000:]
    assert "tasks ran on 2 worker(s)" in out, out[-3000:]
    ran = {e["host"] for e in result["executors"] if e["tasks"]}
    assert len(ran) == 2, result["executors"]
    count = _as_ferry(hosts, f"python - /tmp/sc-state {WAREHOUSE} sc.sparkcheck", stdin=COUNT)
    line = next(x for x in count.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"rows": n, "distinct": n}
    # the worker host wrote into the same volume: its view of the table has the run's files
    files = hosts.exec(WORKER, "sh", "-c", f"find {WAREHOUSE}/sc -name '*.parquet' | wc -l").stdout.decode()
    assert int(files.strip()) > 0

    second = playbook(spark_deployment["inventory"], spark_deployment["tmp"], "spark.yml")
    assert second.returncode == 0, second.stdout[-4000:]
    assert "changed=0" in second.stdout and "changed=1" not in second.stdout, \
        "\n".join(line for line in second.stdout.splitlines() if line.startswith(("TASK", "changed")))[-4000:]
