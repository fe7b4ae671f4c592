"""`ferry load` against a secured offline cluster (docs/loaders.md "Secured clusters"): the driver and the
split readers on the executors reach the brokers over SASL_SSL as the loader's own user (Read on the topics, Write
on `_audit`), from a --command-config file carried by path; a wrong password fails the run in one line that holds
no password; the password is in no Spark conf."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from ferry.zk import ClusterRegistry
from tests.loaders.secured_offline import start_loader_cluster

pytestmark = pytest.mark.slow

LOADER_PW = "Loader-secret-pw-7"
OPS_PW = "Ops-secret-pw-8"


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    cluster = start_loader_cluster(zk_server.connect, tmp_path_factory.mktemp("secload"), "spv_", OPS_PW, LOADER_PW)
    try:
        yield cluster
    finally:
        cluster.stop()


def _produce(cluster, topic: str, timestamps: list[int], schema: dict) -> None:
    """Avro events as `ops` over SASL_SSL (the plaintext listener refuses everyone)."""
    from ferry.client.producer import Producer
    from ferry.schemas.registry import SchemaRegistry
    from ferry.schemas.wire import AvroSerializer
    from ferry.wire.client_config import ClientConfig

    ops = ClientConfig.from_file(cluster.sasl_ssl_config("ops", OPS_PW))
    with SchemaRegistry(cluster.zk) as reg:
        ser = AvroSerializer(reg, topic, schema)
        producer = Producer(zookeeper=cluster.zk, application="secload-test", datacenter="offline",
                            audit_interval_s=3600, client_config=ops)
        for i, ts in enumerate(timestamps):
            producer.send(topic, ser({"event_time": ts, "guid": str(uuid.uuid4()), "member_id": i, "page": f"p{i}",
                                      "tags": [], "attrs": {}}), timestamp_ms=ts)
        assert producer.flush(60) == 0
        assert producer.close(60) == 0


def test_load_over_sasl_ssl_as_the_loader_user(secured, spark, tmp_path, helpers):
    from ferry.loaders import steps
    from ferry.loaders.load_config import LoadConfig

    topic = f"spv_{uuid.uuid4().hex[:8]}"
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic(topic, 2)
    start = helpers.past_hour(2)
    _produce(secured, topic, helpers.spread(start, 300), helpers.PAGE_VIEW)
    config = secured.sasl_ssl_config("loader", LOADER_PW, name="loader.properties")
    db = f"t_{uuid.uuid4().hex[:10]}"
    cfg = LoadConfig(zookeeper=secured.zk, topics=[topic], state_dir=str(tmp_path / "state"),
                     warehouse=str(tmp_path / "wh"), database=db, max_per_split=100, include_audit=False,
                     client_config=str(config), quiet=True)
    _, result = steps.load(cfg, spark)
    assert result.committed and result.rows == 300
    assert spark.sql(f"SELECT count(*) AS n FROM {db}.{result.topics[0].table}").collect()[0].n == 300
    # the settings travel by path: the password is in no Spark conf
    assert not [k for k, v in spark.sparkContext.getConf().getAll() if LOADER_PW in v]

    # a second load of the same session from another state dir with a same-named file of other content
    # (the lesson of SparkContext.addFile's "exists and does not match contents"): read by path, it works
    other = tmp_path / "other"
    other.mkdir()
    (other / "loader.properties").write_text(config.read_text() + "client.id=ferry-load-2\n")
    _produce(secured, topic, helpers.spread(start, 50), helpers.PAGE_VIEW)
    _, again = steps.load(LoadConfig(**{**cfg.__dict__, "state_dir": str(other / "state"),
                                        "client_config": str(other / "loader.properties")}), spark)
    assert again.committed and again.rows == 350  # a new ledger: everything, through the other file

    # a wrong password: the run fails, and says so without the password
    bad = secured.sasl_ssl_config("loader", "not-the-password", name="bad.properties")
    with pytest.raises(Exception) as failed:
        steps.load(LoadConfig(**{**cfg.__dict__, "state_dir": str(tmp_path / "bad"), "client_config": str(bad)}),
                   spark)
    assert "not-the-password" not in str(failed.value)
    assert "uthenticat" in str(failed.value) or "SASL" in str(failed.value), str(failed.value)


def test_plan_step_over_sasl_ssl_from_the_environment(secured, tmp_path, helpers):
    """The plan step (no Spark) reads the brokers' offsets as `loader`, settings from $FERRY_CLIENT_CONFIG;
    without them the anonymous client is refused; a missing file is one line, exit 2."""
    topic = f"spv_{uuid.uuid4().hex[:8]}"
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic(topic, 1)
    _produce(secured, topic, [1_700_000_000_000 + i for i in range(40)], helpers.PAGE_VIEW)
    config = secured.sasl_ssl_config("loader", LOADER_PW, name="env.properties")
    cmd = [sys.executable, "-m", "ferry.cli", "load", "--zookeeper", secured.zk, "--topics", topic, "--step", "plan",
           "--no-audit", "--state-dir", str(tmp_path / "st")]
    env = {**os.environ, "FERRY_CLIENT_CONFIG": str(config)}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("40 messages"), r.stdout
    assert LOADER_PW not in r.stdout + r.stderr

    env.pop("FERRY_CLIENT_CONFIG")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "ListOffsets failed" in r.stderr and not r.stdout.strip(), r.stderr  # the topic is hidden from it

    r = subprocess.run([*cmd, "--command-config", str(tmp_path / "missing.properties")], capture_output=True,
                       text=True, timeout=120, env=env, cwd=tmp_path)
    assert r.returncode == 2 and "missing.properties" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert {p.name for p in tmp_path.iterdir()} <= {"st"}  # nothing left in the cwd


# two loads of one Spark session on a standalone cluster, from two state dirs whose client files share a name
# but not their content: each ships a digest-named copy (no "File ... exists and does not match contents")
CLUSTER_SCRIPT = """
import json, sys
from ferry.loaders import steps
from ferry.loaders.load_config import LoadConfig
from ferry.loaders.session import build_session
a = json.loads(sys.argv[1])
spark = build_session(a["runs"][0][0], master=a["master"], conf={"spark.executor.memory": "512m",
    "spark.driver.memory": "512m", "spark.ui.showConsoleProgress": "false"})
rows = []
for state, config in a["runs"]:
    _, r = steps.load(LoadConfig(zookeeper=a["zk"], topics=[a["topic"]], state_dir=state, warehouse=a["warehouse"],
                                 database="k", master=a["master"], include_audit=False, client_config=config,
                                 quiet=True, max_per_split=60), spark)
    rows.append(r.rows)
conf = [v for _, v in spark.sparkContext.getConf().getAll()]
print("RESULT " + json.dumps({"rows": rows, "password_in_conf": any(a["password"] in v for v in conf)}))
"""


@pytest.mark.spark
def test_cluster_mode_ships_the_settings_under_a_digest_name(secured, tmp_path, helpers):
    from ferry.spark_standalone import SparkStandalone

    topic = f"spv_{uuid.uuid4().hex[:8]}"
    with ClusterRegistry(secured.zk) as reg:
        reg.create_topic(topic, 2)
    _produce(secured, topic, helpers.spread(helpers.past_hour(2), 120), helpers.PAGE_VIEW)
    runs = []
    for name, client_id in (("a", "ferry-load-a"), ("b", "ferry-load-b")):
        folder = tmp_path / name
        folder.mkdir()
        config = folder / "loader.properties"  # one name, two contents
        config.write_text(secured.sasl_ssl_config("loader", LOADER_PW).read_text() + f"client.id={client_id}\n")
        config.chmod(0o600)
        runs.append([str(folder / "state"), str(config)])
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    cluster = SparkStandalone(tmp_path / "spark", workers=1, cores=1, memory="1g").start(timeout=300)
    try:
        args = {"master": cluster.url, "zk": secured.zk, "topic": topic, "warehouse": str(tmp_path / "wh"),
                "runs": runs, "password": LOADER_PW}
        r = subprocess.run([sys.executable, "-c", CLUSTER_SCRIPT, json.dumps(args)], capture_output=True, text=True,
                           timeout=900, env=env, cwd=tmp_path)
    finally:
        cluster.stop()
    assert r.returncode == 0, r.stderr[-4000:]
    result = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert result == {"rows": [120, 120], "password_in_conf": False}
    shipped = sorted(p.name for p in (tmp_path / "a" / "state" / "client-config").iterdir())
    shipped += sorted(p.name for p in (tmp_path / "b" / "state" / "client-config").iterdir())
    assert len(set(shipped)) == 2 and all(n.startswith("ferry-client-") for n in shipped), shipped
