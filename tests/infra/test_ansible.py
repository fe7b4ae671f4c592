"""Ansible provisions both datacenters on containers that play machines, for real.

Hosts are systemd containers of ferry-base (the loader: ferry-warehouse-base, a "machine image" with
PySpark and Airflow already installed) on two internal Docker networks, one per datacenter; the offline
broker is on both (the datacenters' peering: its mirror link pulls from the live brokers, group_vars'
default ferry_mirror_kind: link). Ansible reaches them with ferry's `ferry_docker` connection plugin (docker exec).
Checked: site.yml converges, a second run changes nothing, messages produced in live arrive in offline
through the mirror link, topics are replicated as the datacenter's broker count allows (live: 2 brokers, RF 2;
offline: 1), and rolling_restart.yml restarts the brokers one at a time with each one ready and every ISR
full again before the next, then gives the preferred replicas their leadership back. Prometheus on the
loader host (site.yml's last play) scrapes every broker and the dashboard: all targets up.
The loader's Hive metastore is PostgreSQL (pg_isready, unit active) and a `ferry load` there is counted through
the ferry-sql-thrift unit (Spark's Thrift server) with beeline.
The deployment is the secure default (ferry_security=sasl_ssl, docs/infra.md): every client here logs in over
SASL_SSL with a user whose password the controller generated (the inventory's ferry-secrets/); checked besides:
an allowed and a denied principal (TOPIC_AUTHORIZATION_FAILED), a client without credentials refused, anonymous
ZooKeeper clients unable to read the SCRAM credentials or rewrite a registry znode, the mirror link over SASL_SSL,
Prometheus scraping over HTTPS with basic authentication, the registry over HTTPS with authentication.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ferry_docker_helpers import ROOT, DockerHosts, build_images, docker, docker_or_skip

# Fixture setup may build images from scratch (minutes) before the first test: beyond the default 600 s.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ANSIBLE_DIR = ROOT / "infra" / "ansible"
VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
PROBE = (Path(__file__).parent / "pipeline_probe.py").read_bytes()

# inventory host -> (group, datacenter networks, host vars)
HOSTS = {
    "live-zk-1": ("live_zookeeper", ["live"], {}),
    "live-broker-1": ("live_brokers", ["live"], {"ferry_broker_id": 1}),
    "live-broker-2": ("live_brokers", ["live"], {"ferry_broker_id": 2}),
    "offline-zk-1": ("offline_zookeeper", ["offline"], {}),
    # on both networks: its mirror link pulls from the live ZooKeeper and brokers (the datacenters' peering); its
    # /metrics on every interface, as its name may resolve to either network's address
    "offline-broker-1": ("offline_brokers", ["offline", "live"],
                         {"ferry_broker_id": 1, "broker_metrics_listen_address": "0.0.0.0"}),
    # on both networks: Prometheus there scrapes the live brokers too (the datacenters' peering); its
    # machine image carries PostgreSQL (the metastore) and its JDBC driver, as the test hosts have no apt mirror
    "offline-loader-1": ("loader", ["offline", "live"], {}),
    # the second worker of the loads' Spark cluster (the loader host runs the master and the first: SPARK_WORKERS)
    "offline-spark-1": ("spark_workers", ["offline"], {}),
}
# spark.yml's workers: these hosts mount one warehouse volume at the loader's warehouse path
SPARK_WORKERS = ("offline-loader-1", "offline-spark-1")
WAREHOUSE = "/var/lib/ferry/warehouse"  # the loader role's loader_warehouse_dir
WITH_LOADER = os.environ.get("FERRY_ANSIBLE_LOADER", "1") != "0"
TLS_PORT = 9093  # the brokers' SASL_SSL listener (group_vars/all.yml ferry_broker_tls_port); 9092 is not opened
LIVE_BOOTSTRAP = f"live-broker-1:{TLS_PORT},live-broker-2:{TLS_PORT}"
OFFLINE_BOOTSTRAP = f"offline-broker-1:{TLS_PORT}"
OFFLINE_ZK = "offline-zk-1:2281/ferry/offline"  # ZooKeeper over TLS (ZK_TLS_CONFIG)


def mirror_link(hosts: DockerHosts, *args: str) -> subprocess.CompletedProcess:
    """`ferry mirror link ARGS --zookeeper OFFLINE_ZK` on the offline broker, with the deployment's ZooKeeper identity."""
    return hosts.exec("offline-broker-1", "env", "FERRY_ZOOKEEPER_CREDENTIALS=/etc/ferry/zk-credentials",
                      f"FERRY_ZOOKEEPER_TLS_CONFIG={ZK_TLS_CONFIG}", "/opt/ferry/venv/bin/ferry", "mirror", "link", *args, "--zookeeper", OFFLINE_ZK)


def link_partitions_state(hosts: DockerHosts, name: str, state: str, timeout: float = 60) -> dict:
    """Wait until every partition the offline leaders report for link `name` is in `state`; its describe --json."""
    deadline = time.monotonic() + timeout
    while True:
        doc = json.loads(mirror_link(hosts, "describe", name, "--json").stdout.decode())
        if doc["partitions"] and all(p["state"] == state for p in doc["partitions"]):
            return doc
        assert time.monotonic() < deadline, f"link {name} not {state} after {timeout:.0f}s: {doc}"
        time.sleep(1)
def client_config(hosts: DockerHosts, host: str, secrets: Path, user: str, owner: str = "root") -> str:
    """A 0600 file of `user`'s SASL_SSL client settings on `host` (its password from the controller's secrets),
    owned by `owner`."""
    password = (secrets / "passwords" / user).read_text().strip()
    path = f"/tmp/probe-{user}-{owner}.properties"
    text = (f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username={user}\n"
            f"sasl.password={password}\nssl.ca.location=/etc/ferry/tls/ca.pem\n")
    hosts.exec(host, "sh", "-c", f"umask 077 && cat > {path} && chown {owner} {path}", input=text.encode())
    return path


def write_inventory(path: Path, hosts: DockerHosts, layout: dict | None = None) -> None:
    """The inventory of `layout` (HOSTS unless given) as the containers of `hosts` play it."""
    groups: dict[str, dict] = {}
    for host, (group, _, hostvars) in (HOSTS if layout is None else layout).items():
        if group in ("loader", "spark_workers") and not WITH_LOADER:
            continue
        groups.setdefault(group, {"hosts": {}})["hosts"][host] = {
            "ansible_host": hosts.name(host), **hostvars}
    for group in ("live_zookeeper", "live_brokers", "offline_zookeeper", "offline_brokers", "mirror", "loader",
                  "spark_workers"):
        groups.setdefault(group, {"hosts": {}})
    if "offline-loader-1" in groups["loader"]["hosts"] and groups["spark_workers"]["hosts"]:
        # the loader host (spark_master_host) runs a worker too: a second group of one host in HOSTS' terms
        groups["spark_workers"]["hosts"]["offline-loader-1"] = {"ansible_host": hosts.name("offline-loader-1")}
    inventory = {"all": {
        "vars": {"ansible_connection": "ferry_docker", "ansible_python_interpreter": "/usr/bin/python3",
                 # small Spark workers; the DAGs' loads stay in local mode as without spark_workers (the cluster
                 # is checked by an explicit --master load)
                 "spark_worker_cores": 1, "spark_worker_memory": "1g", "loader_spark_master": "local[*]"},
        "children": {
            "live": {"children": {g: groups[g] for g in ("live_zookeeper", "live_brokers")}},
            "offline": {"children": {g: groups[g] for g in ("offline_zookeeper", "offline_brokers", "mirror",
                                                             "loader", "spark_workers")}},
            "zookeeper": {"children": {"live_zookeeper": {}, "offline_zookeeper": {}}},
            "brokers": {"children": {"live_brokers": {}, "offline_brokers": {}}},
            "schema_registry": {"hosts": {"live-broker-1": {}}},
        }}}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))


class Playbook:
    """ansible-playbook against the test inventory; keeps each run's output and timing."""

    def __init__(self, inventory: Path, log_dir: Path) -> None:
        self.inventory = inventory
        self.log_dir = log_dir
        self.runs = 0

    def __call__(self, playbook: str, *extra: str, timeout: float = 900) -> tuple[subprocess.CompletedProcess, dict]:
        self.runs += 1
        env = dict(os.environ, ANSIBLE_CONFIG=str(ANSIBLE_DIR / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_NOCOLOR="1", PATH=f"{VENV_BIN}:{os.environ['PATH']}")
        t0 = time.monotonic()
        p = subprocess.run([str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory), playbook, *extra],
                           cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True, timeout=timeout)
        took = time.monotonic() - t0
        log = self.log_dir / f"run{self.runs}-{Path(playbook).stem}.log"
        log.write_text(p.stdout + "\n--- stderr ---\n" + p.stderr)
        print(f"[ansible] {playbook} {' '.join(extra)}: rc={p.returncode} in {took:.1f}s (log {log})")
        return p, recap(p.stdout)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines -> {host: {"ok": n, "changed": n, "failed": n, ...}} (summed over plays)."""
    totals: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", output, re.M):
        counts = totals.setdefault(m.group(1), {})
        for k, v in re.findall(r"(\w+)=(\d+)", m.group(2)):
            counts[k] = counts.get(k, 0) + int(v)
    return totals


def changed_tasks(output: str) -> list[str]:
    """Names of tasks that reported `changed:` in a run's output (to explain a non-idempotent run)."""
    task = ""
    out = []
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("changed:"):
            out.append(f"{task} {line}")
    return out


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory):
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("base", "wheels", *(["warehouse"] if WITH_LOADER else []))
    t_images = time.monotonic() - t0
    hosts = DockerHosts()
    warehouse = f"ferry-warehouse-{hosts.run_id}"  # the Spark workers' shared storage (labelled: cleanup removes it)
    try:
        nets = {"live": hosts.network("ferry-live"), "offline": hosts.network("ferry-offline")}
        docker("volume", "create", "--label", hosts.label, warehouse)
        for host, (group, dcs, _) in HOSTS.items():
            if group in ("loader", "spark_workers"):
                if not WITH_LOADER:
                    continue
                image = images["FERRY_WAREHOUSE_BASE_IMAGE"]
            else:
                image = images["FERRY_BASE_IMAGE"]
            extra = ["-v", f"{warehouse}:{WAREHOUSE}"] if host in SPARK_WORKERS else []
            hosts.run(host, image, [nets[dc] for dc in dcs], systemd=True, extra=extra)
        for host in hosts.containers:
            hosts.wait_systemd(host.removeprefix(f"ferry-{hosts.run_id}-"))
        tmp = tmp_path_factory.mktemp("ansible")
        inventory = tmp / "hosts.yml"
        write_inventory(inventory, hosts)
        play = Playbook(inventory, tmp)
        t1 = time.monotonic()
        # the first converge installs everything: minutes alone, beyond 900 s on a 2-core machine shared by other
        # suites (load average ~20 measured); bounded all the same
        first = play("site.yml", timeout=1800)
        t_first = time.monotonic() - t1
        print(f"[ansible] images {t_images:.1f}s, first site.yml {t_first:.1f}s")
        yield {"hosts": hosts, "play": play, "first": first, "secrets": tmp / "ferry-secrets"}
    finally:
        hosts.cleanup()
        docker("volume", "rm", "-f", warehouse, check=False)


def probe(hosts: DockerHosts, host: str, *args: str, timeout: float = 120) -> dict:
    p = hosts.exec(host, "/opt/ferry/venv/bin/python", "-", *args, input=PROBE, timeout=timeout + 30, check=False)
    out = p.stdout.decode(errors="replace").strip()
    assert p.returncode == 0, f"probe on {host} failed: {out}\n{p.stderr.decode(errors='replace')}"
    return json.loads(out.splitlines()[-1])


# --- a datacenter of three brokers: the rolling restart under acks=all production (issue 16) -------------
# Its own hosts (ZooKeeper + three brokers, so group_vars/all.yml gives RF 3 and min.insync.replicas=2). The
# fixture is function-scoped and its test comes before the two-datacenter tests, so that its hosts are gone
# before `deployment` starts its own: both at once would be eleven systemd hosts on two cores.
THREE_BROKERS = {
    "live-zk-1": ("live_zookeeper", ["live"], {}),
    **{f"live-broker-{i}": ("live_brokers", ["live"], {"ferry_broker_id": i}) for i in (1, 2, 3)},
}
# ZooKeeper over TLS (secureClientPort) with the deployment's CA: the secure default (ferry_zookeeper_tls)
LIVE_ZK = "live-zk-1:2281/ferry/live"
ZK_TLS_CONFIG = "/etc/ferry/zk-tls.properties"  # zookeeper.ssl.* of every ferry process on a host
THREE_BOOTSTRAP = f"live-broker-1:{TLS_PORT},live-broker-2:{TLS_PORT},live-broker-3:{TLS_PORT}"
UPGRADE_VERSION = "0.1.0.post1"  # the same code under another version: what rolling_upgrade.yml rolls out


@pytest.fixture
def three_broker_datacenter(tmp_path: Path):
    """site.yml converged on ZooKeeper + three brokers of one datacenter (no offline side, no loader)."""
    docker_or_skip()
    t0 = time.monotonic()
    images = build_images("base", "wheels")
    t_images = time.monotonic() - t0
    hosts = DockerHosts()
    try:
        net = hosts.network("ferry-live")
        for host in THREE_BROKERS:
            hosts.run(host, images["FERRY_BASE_IMAGE"], [net], systemd=True)
        for host in THREE_BROKERS:
            hosts.wait_systemd(host)
        inventory = tmp_path / "hosts.yml"
        write_inventory(inventory, hosts, THREE_BROKERS)
        play = Playbook(inventory, tmp_path)
        t1 = time.monotonic()
        p, totals = play("site.yml")
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
        print(f"[ansible] images {t_images:.1f}s, site.yml on three brokers {time.monotonic() - t1:.1f}s")
        yield {"hosts": hosts, "play": play, "secrets": tmp_path / "ferry-secrets"}
    finally:
        hosts.cleanup()


def wheelhouse_at_version(src: Path, work: Path, version: str) -> Path:
    """The wheelhouse archive with ferry's wheel relabelled `version` (the same code): a new build to roll out."""
    import tarfile

    unpacked, repacked = work / "wheelhouse", work / "repacked"
    unpacked.mkdir(parents=True)
    repacked.mkdir()
    with tarfile.open(src) as tar:
        tar.extractall(unpacked, filter="data")
    (old,) = unpacked.glob("ferry-*.whl")
    subprocess.run([str(VENV_BIN / "wheel"), "unpack", str(old), "-d", str(work / "tree")], check=True,
                   capture_output=True)
    (tree,) = (work / "tree").iterdir()
    (info,) = tree.glob("ferry-*.dist-info")
    meta = info / "METADATA"
    meta.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {version}", meta.read_text()))
    info.rename(tree / f"ferry-{version}.dist-info")
    subprocess.run([str(VENV_BIN / "wheel"), "pack", str(tree), "-d", str(repacked)], check=True, capture_output=True)
    old.unlink()
    for whl in repacked.glob("ferry-*.whl"):
        whl.rename(unpacked / whl.name)
    out = work / "wheelhouse.tar"
    with tarfile.open(out, "w") as tar:
        for f in sorted(unpacked.iterdir()):
            tar.add(f, arcname=f"./{f.name}")
    return out


def test_rolling_restart_and_upgrade_under_acks_all_production_fail_no_request(three_broker_datacenter,
                                                                               tmp_path: Path) -> None:
    """rolling_restart.yml, then rolling_upgrade.yml to another ferry version, while an acks=all idempotent
    producer keeps producing: not one delivery fails and every message is stored once. Each broker's SIGTERM is
    a controlled shutdown (its leaderships move to in-sync replicas first) and the playbooks stop the next broker
    only once every ISR is full again, so min.insync.replicas=2 holds throughout; the producer only ever meets
    retriable answers. After the upgrade every broker runs the new version."""
    hosts: DockerHosts = three_broker_datacenter["hosts"]
    play: Playbook = three_broker_datacenter["play"]
    props = hosts.exec("live-broker-3", "cat", "/etc/ferry/broker.properties").stdout.decode()
    assert "default.replication.factor=3" in props and "min.insync.replicas=2" in props, props
    page_view = next(t for t in describe(hosts, "live-broker-1", LIVE_ZK) if t["topic"] == "page_view")
    assert page_view["replication_factor"] == 3, page_view
    assert sorted({part["leader"] for part in page_view["partitions"]}) == [1, 2, 3], page_view

    def started(host: str) -> int:
        out = hosts.exec(host, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "ferry-broker").stdout
        return int(out.decode().strip().split("=", 1)[1])

    brokers = [h for h in THREE_BROKERS if h.startswith("live-broker-")]
    before = {h: started(h) for h in brokers}
    # The producer runs on the ZooKeeper host: on the datacenter's network, and up through every restart.
    # Its output goes to files: librdkafka's log lines about restarting brokers must never fill a pipe.
    out_path, err_path = tmp_path / "stream.out", tmp_path / "stream.err"
    producer = client_config(hosts, "live-zk-1", three_broker_datacenter["secrets"], "producer")
    ops = client_config(hosts, "live-zk-1", three_broker_datacenter["secrets"], "ops")
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            ["docker", "exec", "-i", hosts.name("live-zk-1"), "/opt/ferry/venv/bin/python", "-c", PROBE.decode(),
             "stream", "--bootstrap", THREE_BOOTSTRAP, "--config", producer, "--topic", "page_view", "--prefix",
             "rolling", "--rate",
             "100", "--duration", "900", "--timeout", "120"], stdin=subprocess.PIPE, stdout=out, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while b"DELIVERED" not in out_path.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"the producer delivered nothing: {out_path.read_text()} {err_path.read_text()[-3000:]}"
            time.sleep(0.2)
        p, totals = play("rolling_restart.yml", "-l", "live_brokers")
        assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
        restarted = {h: started(h) for h in brokers}
        new_wheels = wheelhouse_at_version(ROOT / "infra" / "images" / "build" / "wheelhouse.tar", tmp_path / "b",
                                           UPGRADE_VERSION)
        up, _ = play("rolling_upgrade.yml", "-l", "live_brokers", "-e", f"ferry_wheelhouse={new_wheels}")
        time.sleep(3)  # production goes on past the last restart
        proc.communicate(b"stop\n", timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert up.returncode == 0, up.stdout[-6000:] + up.stderr[-3000:]
    assert up.stdout.count("PLAY [Upgrade the brokers one at a time]") == 3, "not one broker at a time"
    assert all(started(h) > restarted[h] for h in brokers), "not every broker was restarted on the new build"
    for h in brokers:
        version = hosts.exec(h, "/opt/ferry/venv/bin/python", "-c",
                             "import importlib.metadata as m; print(m.version('ferry'))").stdout.decode().strip()
        assert version == UPGRADE_VERSION, f"{h} runs ferry {version} after the upgrade"
    lines = out_path.read_text().strip().splitlines()
    assert proc.returncode == 0 and lines, f"producer: rc {proc.returncode} {lines} {err_path.read_text()[-3000:]}"
    result = json.loads(lines[-1])
    print(f"[ansible] rolling restart and upgrade under production: {result}")
    assert all(restarted[h] > before[h] for h in brokers), "not every broker was restarted"
    assert result["failed"] == 0, f"failed deliveries during the rolling restart: {result}"
    assert result["delivered"] == result["produced"] > 0, result
    got = probe(hosts, "live-zk-1", "count", "--bootstrap", THREE_BOOTSTRAP, "--config", ops, "--topic", "page_view",
                "--prefix", "rolling", "--expect", str(result["produced"]), "--timeout", "120")
    assert got["distinct"] == result["produced"] and got["duplicates"] == 0, \
        f"{got}\n{_partition_history(hosts, brokers, got)}"
    page_view = next(t for t in describe(hosts, "live-broker-1", LIVE_ZK) if t["topic"] == "page_view")
    for part in page_view["partitions"]:
        assert sorted(part["isr"]) == [1, 2, 3] and part["leader"] == part["replicas"][0], page_view


def _partition_history(hosts: DockerHosts, brokers: list[str], got: dict) -> str:
    """What each broker logged about the partitions that hold a duplicate (leader changes, truncations):
    the evidence a duplicate needs, gathered before the containers go."""
    parts = sorted({p for copies in got.get("duplicate_sample", {}).values() for p, _ in copies})
    out = []
    for h in brokers:
        text = hosts.exec(h, "journalctl", "-u", "ferry-broker", "--no-pager", "-o", "cat",
                          check=False).stdout.decode(errors="replace")
        keep = [line for line in text.splitlines() if any(f"page_view-{p}" in line for p in parts)
                or "controlled shutdown" in line or "stopped" in line or "started" in line]
        out.append(f"--- {h} ---\n" + "\n".join(keep[-80:]))
    return "\n".join(out)


def test_site_converges(deployment) -> None:
    p, totals = deployment["first"]
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert totals and all(c.get("failed", 0) == 0 and c.get("unreachable", 0) == 0 for c in totals.values()), totals
    expected = {h for h, (g, _, _) in HOSTS.items() if WITH_LOADER or g not in ("loader", "spark_workers")}
    assert set(totals) == expected


def test_services_run_under_systemd(deployment) -> None:
    hosts: DockerHosts = deployment["hosts"]
    units = {"live-zk-1": ["ferry-zookeeper"], "offline-zk-1": ["ferry-zookeeper"],
             "live-broker-1": ["ferry-broker", "ferry-schema-registry"], "live-broker-2": ["ferry-broker"],
             "offline-broker-1": ["ferry-broker"]}
    if WITH_LOADER:
        units["offline-loader-1"] = ["ferry-airflow-api-server", "ferry-airflow-scheduler",
                                     "ferry-airflow-dag-processor", "prometheus", "ferry-dashboard",
                                     "postgresql", "ferry-sql-thrift"]
    for host, names in units.items():
        for unit in names:
            p = hosts.exec(host, "systemctl", "is-active", unit, check=False)
            assert p.stdout.decode().strip() == "active", f"{unit} on {host}: {p.stdout!r}\n" + hosts.exec(
                host, "journalctl", "-u", unit, "--no-pager", "-n", "40", check=False).stdout.decode()
            p = hosts.exec(host, "systemctl", "is-enabled", unit, check=False)
            assert p.stdout.decode().strip() == "enabled"
    if WITH_LOADER:  # Airflow parsed ferry's DAGs from the rendered configuration, without import errors
        airflow = "set -a; . /etc/ferry/airflow.env; set +a; cd /var/lib/ferry/airflow; airflow dags "
        out = hosts.exec("offline-loader-1", "su", "-s", "/bin/sh", "ferry", "-c",
                         airflow + "list -o json 2>/dev/null", timeout=180).stdout.decode()
        listing = [ln for ln in out.splitlines() if ln.startswith("[{") or ln == "[]"]
        assert listing, out
        dags = {d["dag_id"]: d for d in json.loads(listing[-1])}
        assert "ferry_load_activity" in dags and str(dags["ferry_load_activity"]["is_paused"]) == "False", dags
        errors = hosts.exec("offline-loader-1", "su", "-s", "/bin/sh", "ferry", "-c",
                            airflow + "list-import-errors -o json 2>/dev/null", timeout=180).stdout.decode()
        assert "ferry_dag" not in errors, errors
    props = hosts.exec("live-broker-2", "cat", "/etc/ferry/broker.properties").stdout.decode()
    assert "broker.id=2" in props and f"zookeeper.connect={LIVE_ZK}" in props
    assert f"advertised.listeners=SASL_SSL://live-broker-2:{TLS_PORT}" in props and "PLAINTEXT://" not in props
    assert "inter.broker.listener.name=SASL_SSL" in props and "authorizer.class.name=ferry" in props
    assert "super.users=User:broker;User:ops" in props
    assert "metrics.listen=live-broker-2:9308" in props  # Prometheus on the loader host scrapes it
    # two live brokers: every partition on both, acks=all needs one in sync (group_vars/all.yml)
    assert "default.replication.factor=2" in props and "min.insync.replicas=1" in props
    offline_props = hosts.exec("offline-broker-1", "cat", "/etc/ferry/broker.properties").stdout.decode()
    assert "default.replication.factor=1" in offline_props and "min.insync.replicas=1" in offline_props
    live = describe(hosts, "live-broker-1", LIVE_ZK)
    assert {t["topic"]: t["replication_factor"] for t in live} == {"_audit": 2, "page_view": 2, "click": 2,
                                                                   "search": 2}
    # the embedded mirror by default: no standalone mirror service anywhere, one link in the offline cluster
    assert hosts.exec("offline-broker-1", "test", "-e", "/etc/systemd/system/ferry-mirror.service",
                      check=False).returncode != 0
    listed = json.loads(mirror_link(hosts, "list", "--json").stdout.decode())
    assert [(lk["name"], lk["state"], lk["source_zookeeper"], lk["include"]) for lk in listed] == \
        [("live", "running", LIVE_ZK, "(?:.*)|_audit")], listed


def describe(hosts: DockerHosts, host: str, zookeeper: str) -> list[dict]:
    """`ferry topics describe --json` of a cluster, run on one of its hosts."""
    out = hosts.exec(host, "env", f"FERRY_ZOOKEEPER_TLS_CONFIG={ZK_TLS_CONFIG}", "/opt/ferry/venv/bin/ferry", "topics",
                     "describe", "--json", "--zookeeper", zookeeper)
    return json.loads(out.stdout.decode())


def test_live_to_offline_through_the_mirror(deployment) -> None:
    """The app producers' user produces into live over SASL_SSL; the offline broker's mirror link (SASL_SSL to
    live as its own user, mirror-link, whose file is 0600 ferry; the copy written as the broker's own principal)
    copies everything into offline, where the loader's user reads it."""
    hosts: DockerHosts = deployment["hosts"]
    producer = client_config(hosts, "live-broker-1", deployment["secrets"], "producer")
    loader = client_config(hosts, "offline-broker-1", deployment["secrets"], "loader")
    n = 500
    sent = probe(hosts, "live-broker-1", "produce", "--bootstrap", LIVE_BOOTSTRAP, "--config", producer,
                 "--topic", "page_view", "--count", str(n), "--prefix", "ansible1")
    assert sent == {"delivered": n, "failed": 0}
    got = probe(hosts, "offline-broker-1", "count", "--bootstrap", OFFLINE_BOOTSTRAP, "--config", loader,
                "--topic", "page_view", "--prefix", "ansible1", "--expect", str(n), "--timeout", "120")
    assert got["distinct"] == n, got
    path = "/etc/ferry/mirror-link-live.properties"
    st = hosts.exec("offline-broker-1", "stat", "-c", "%a %U", path).stdout.decode().split()
    assert st == ["600", "ferry"], (path, st)
    text = hosts.exec("offline-broker-1", "cat", path).stdout.decode()
    assert "security.protocol=SASL_SSL" in text and "sasl.username=mirror-link" in text
    # the link logged in as its user (its ACLs the only ones that let it read live): running, no failure
    doc = json.loads(mirror_link(hosts, "describe", "live", "--json").stdout.decode())
    assert doc["state"] == "running" and not doc["failures"] and doc["source_config"] == path, doc
    copied = {p["partition"]: p for p in doc["partitions"] if p["topic"] == "page_view"}
    assert len(copied) == 4 and all(p["state"] == "copying" for p in copied.values()), doc
    assert (secrets_password(deployment, "mirror-link") not in
            mirror_link(hosts, "describe", "live").stdout.decode())  # never shown


ZK_ANONYMOUS = """\
import json, sys
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from ferry.zk.zk_tls import ZkTlsConfig
zk = KazooClient(hosts=sys.argv[1], **ZkTlsConfig.from_file(sys.argv[2]).kazoo_arguments()); zk.start(15)
out = {}
try:
    zk.get("/config/users/ops"); out["read_users"] = "allowed"
except NoAuthError:
    out["read_users"] = "NoAuth"
data, _ = zk.get("/brokers/topics/page_view")  # the registry stays readable
out["read_topic"] = bool(data)
try:
    zk.set("/brokers/topics/page_view", b"{}"); out["write_topic"] = "allowed"
except NoAuthError:
    out["write_topic"] = "NoAuth"
try:
    zk.delete("/brokers/topics/page_view", recursive=True); out["delete_topic"] = "allowed"
except NoAuthError:
    out["delete_topic"] = "NoAuth"
zk.stop()
print(json.dumps(out))
"""


def secrets_password(deployment: dict, user: str) -> str:
    return (deployment["secrets"] / "passwords" / user).read_text().strip()


def test_secure_setup_allows_and_denies_principals(deployment) -> None:
    """Least privilege, with real clients: the app producers' user may write live topics, the loader's user may
    not write offline (TOPIC_AUTHORIZATION_FAILED), the mirror's live user may not write live; a wrong password
    and a client without SASL are refused; anonymous ZooKeeper clients read the registry but neither the SCRAM
    credentials nor a rewrite or delete of a registry znode; certificates and keys are the ferry user's only."""
    hosts: DockerHosts = deployment["hosts"]
    secrets: Path = deployment["secrets"]
    producer = client_config(hosts, "live-broker-2", secrets, "producer")
    mirror_live = client_config(hosts, "live-broker-2", secrets, "mirror-live")
    mirror_link_user = client_config(hosts, "live-broker-2", secrets, "mirror-link")
    loader = client_config(hosts, "offline-broker-1", secrets, "loader")

    def denied(host: str, bootstrap: str, config: str, topic: str = "page_view") -> str | None:
        return probe(hosts, host, "denied", "--bootstrap", bootstrap, "--topic", topic, "--config", config,
                     "--timeout", "30")["error"]

    assert denied("live-broker-2", LIVE_BOOTSTRAP, producer) is None  # allowed: Write on page_view
    assert denied("offline-broker-1", OFFLINE_BOOTSTRAP, loader) == "TOPIC_AUTHORIZATION_FAILED"
    assert denied("live-broker-2", LIVE_BOOTSTRAP, mirror_live) == "TOPIC_AUTHORIZATION_FAILED"
    assert denied("live-broker-2", LIVE_BOOTSTRAP, mirror_link_user) == "TOPIC_AUTHORIZATION_FAILED"
    # a wrong password, and a client that does not speak SASL_SSL at all: nothing delivered
    bad = "/tmp/probe-bad.properties"
    text = hosts.exec("live-broker-2", "cat", producer).stdout.decode().replace("sasl.password=", "sasl.password=x")
    hosts.exec("live-broker-2", "sh", "-c", f"umask 077 && cat > {bad}", input=text.encode())
    assert denied("live-broker-2", LIVE_BOOTSTRAP, bad) not in (None, "TOPIC_AUTHORIZATION_FAILED")
    plain = "/tmp/probe-plain.properties"
    hosts.exec("live-broker-2", "sh", "-c", f"echo security.protocol=PLAINTEXT > {plain}")
    assert denied("live-broker-2", LIVE_BOOTSTRAP, plain) is not None
    assert hosts.exec("live-broker-2", "python3", "-c", "import socket; socket.create_connection(('live-broker-2', "
                      "9092), 3)", check=False).returncode != 0, "a PLAINTEXT listener is open"
    out = hosts.exec("live-broker-2", "/opt/ferry/venv/bin/python", "-c", ZK_ANONYMOUS, LIVE_ZK,
                     ZK_TLS_CONFIG).stdout.decode()
    assert json.loads(out.strip().splitlines()[-1]) == {"read_users": "NoAuth", "read_topic": True,
                                                        "write_topic": "NoAuth", "delete_topic": "NoAuth"}, out
    for path, mode in (("/etc/ferry/tls/host.pem", "600 ferry"), ("/etc/ferry/zk-credentials", "600 ferry"),
                       ("/etc/ferry/broker.properties", "640 root"), ("/etc/ferry/ops.properties", "600 root")):
        st = hosts.exec("live-broker-2", "stat", "-c", "%a %U", path).stdout.decode().strip()
        assert st == mode, (path, st)
    # no password in Ansible's output of the first run (no_log on every task that handles one)
    first, _ = deployment["first"]
    for user in ("broker", "ops", "producer", "mirror-live", "mirror-link", "loader", "monitor"):
        assert (secrets / "passwords" / user).read_text().strip() not in first.stdout, user


PROMETHEUS_TARGETS = """\
import json, sys, time, urllib.request
deadline = time.monotonic() + float(sys.argv[1])
while True:
    try:
        data = json.load(urllib.request.urlopen("http://127.0.0.1:9090/api/v1/targets?state=active", timeout=5))
        active = data["data"]["activeTargets"]
    except OSError as e:
        active = [{"error": repr(e)}]
    if (active and all(t.get("health") == "up" for t in active)) or time.monotonic() > deadline:
        break
    time.sleep(2)
print(json.dumps([{k: t.get(k) for k in ("scrapePool", "scrapeUrl", "health", "lastError", "error")} for t in active]))
"""


def test_prometheus_scrapes_every_broker_mirror_and_the_dashboard(deployment) -> None:
    """Prometheus on the loader host (site.yml) finds every target up: the brokers of both datacenters
    (metrics.listen on their ferry_address; the offline broker's carry its mirror link's), `ferry dashboard`'s
    /metrics, itself (no standalone mirror: the links are the default); the installed alert rules pass promtool."""
    if not WITH_LOADER:
        pytest.skip("FERRY_ANSIBLE_LOADER=0: no loader host, no Prometheus")
    hosts: DockerHosts = deployment["hosts"]
    t0 = time.monotonic()
    out = hosts.exec("offline-loader-1", "python3", "-c", PROMETHEUS_TARGETS, "60", timeout=120).stdout.decode()
    targets = json.loads(out.strip().splitlines()[-1])
    print(f"[ansible] prometheus targets after {time.monotonic() - t0:.1f}s: {targets}")
    urls = {t["scrapeUrl"]: t["health"] for t in targets}
    # over HTTPS with basic authentication (the monitor's user), Prometheus itself over HTTP on loopback
    expected = {f"https://{h}:9308/metrics" for h in ("live-broker-1", "live-broker-2", "offline-broker-1")}
    expected |= {"https://127.0.0.1:8500/metrics", "http://127.0.0.1:9090/metrics"}
    assert set(urls) == expected, targets
    assert all(health == "up" for health in urls.values()), targets
    p = hosts.exec("offline-loader-1", "promtool", "check", "rules", "/etc/prometheus/rules/ferry_alerts.yml",
                   check=False)
    assert p.returncode == 0 and b"SUCCESS" in p.stdout + p.stderr, p.stdout + p.stderr
    config = hosts.exec("offline-loader-1", "promtool", "check", "config", "/etc/prometheus/prometheus.yml",
                        check=False)
    assert config.returncode == 0, config.stdout + config.stderr
    board = hosts.exec("offline-loader-1", "python3", "-m", "json.tool", "/usr/share/ferry/grafana/ferry-brokers.json",
                       check=False)  # the brokers' Grafana dashboard, shipped with the role
    assert board.returncode == 0 and b"ferry_request_total_time_seconds" in board.stdout, board.stderr


REGISTRY_GET = """\
import base64, json, ssl, sys, time, urllib.error, urllib.request
url, user, password = sys.argv[1:4]
ctx = ssl.create_default_context(cafile="/etc/ferry/tls/ca.pem")
req = urllib.request.Request(url)
if user:
    req.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
for _ in range(100):
    try:
        print(json.dumps({"status": 200, "body": json.load(urllib.request.urlopen(req, timeout=5, context=ctx))}))
        break
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code}))
        break
    except OSError:
        time.sleep(0.3)
"""


def test_schema_registry_rest_api_serves_the_live_registry(deployment) -> None:
    """Over HTTPS (the host's certificate, checked against the deployment's CA) with basic authentication
    against the live cluster's SCRAM users: no credentials, 401; the ops user reads the configuration."""
    hosts: DockerHosts = deployment["hosts"]
    password = (deployment["secrets"] / "passwords" / "ops").read_text().strip()
    url = "https://live-broker-1:8081/config"

    def get(user: str, pw: str) -> dict:
        out = hosts.exec("live-broker-1", "/opt/ferry/venv/bin/python", "-c", REGISTRY_GET, url, user, pw,
                         timeout=120).stdout.decode()
        return json.loads(out.strip().splitlines()[-1])

    assert get("", "") == {"status": 401}
    answer = get("ops", password)
    assert answer["status"] == 200 and answer["body"]["compatibilityLevel"] == "BACKWARD", answer


SQL_CHECK_PRODUCE = b"""\
import sys, time
from ferry.client.producer import Producer
from ferry.schemas.registry import SchemaRegistry, subject_for_topic
from ferry.schemas.wire import AvroSerializer
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.wire.client_config import ClientConfig
zk, topic, n, config = sys.argv[1], sys.argv[2], int(sys.argv[3]), ClientConfig.from_file(sys.argv[4])
reg = ClusterRegistry(zk).start()
try:
    reg.create_topic(topic, 1, {}, replication_factor=1)
finally:
    reg.stop()
schema = '{"type": "record", "name": "SqlCheck", "namespace": "ferry.test", "fields": [{"name": "n", "type": "long"}]}'
hour = (int(time.time()) // 3600 - 2) * 3_600_000
with SchemaRegistry(zk) as sr:
    sr.register(subject_for_topic(topic), schema)
    ser = AvroSerializer(sr, subject_for_topic(topic))
    producer = Producer(zookeeper=zk, application="sqlcheck", audit_interval_s=1.0, client_config=config)
    for i in range(n):
        producer.send(topic, ser.serialize({"n": i}), None, timestamp_ms=hour + 1000 * i)
    assert producer.close() == 0
print("produced", n)
"""


def test_loads_and_analysts_share_the_postgresql_metastore(deployment) -> None:
    """The loader role's PostgreSQL metastore and Thrift server for real: a `ferry load` on the loader host (its
    environment file names the metastore) commits rows, and beeline through the ferry-sql-thrift unit counts them."""
    if not WITH_LOADER:
        pytest.skip("FERRY_ANSIBLE_LOADER=0: no loader host")
    hosts: DockerHosts = deployment["hosts"]
    loader = "offline-loader-1"
    ready = hosts.exec(loader, "pg_isready", "-h", "127.0.0.1", "-p", "5432", check=False)
    assert ready.returncode == 0, ready.stdout + ready.stderr
    env = "set -a; . /etc/ferry/airflow.env; set +a; cd /tmp; "
    assert "FERRY_METASTORE=postgresql://" in hosts.exec(loader, "cat", "/etc/ferry/airflow.env").stdout.decode()

    def as_ferry(command: str, timeout: float = 300, stdin: bytes | None = None) -> str:
        p = hosts.exec(loader, "su", "-s", "/bin/sh", "ferry", "-c", env + command, timeout=timeout, check=False,
                       input=stdin)
        out = (p.stdout + p.stderr).decode(errors="replace")
        assert p.returncode == 0, f"{command}: rc={p.returncode}\n{out[-4000:]}"
        return out

    n = 37
    ops = client_config(hosts, loader, deployment["secrets"], "ops", owner="ferry")  # a super user: a new topic
    assert f"produced {n}" in as_ferry(f"python - \"$FERRY_ZOOKEEPER\" sqlcheck 37 {ops}", stdin=SQL_CHECK_PRODUCE)
    as_ferry("ferry load --topics sqlcheck --state-dir /tmp/sqlcheck-state --warehouse \"$FERRY_WAREHOUSE\" "
             "--database sqlcheck --master 'local[1]' --no-audit", timeout=600)
    # the Thrift server (started by systemd at deploy time) answers once it listens
    beeline = ('for i in $(seq 1 90); do (echo > /dev/tcp/127.0.0.1/10000) 2>/dev/null && break; sleep 2; done; '
               'SPARK_HOME=$(python -c "import os, pyspark; print(os.path.dirname(pyspark.__file__))") '
               '&& "$SPARK_HOME/bin/beeline" -u jdbc:hive2://127.0.0.1:10000/sqlcheck -n analyst --silent=true '
               '--outputformat=tsv2 --showHeader=false -e "SELECT count(*) FROM sqlcheck" < /dev/null')
    out = as_ferry("bash -c " + shlex.quote(beeline), timeout=400)
    assert str(n) in out.split(), out[-3000:]


def test_deployed_dags_judge_completeness_from_the_live_counts(deployment) -> None:
    """The loader role renders every DAG group with the live clusters' connect strings, and the DAG factory on
    the loader host reads them: an hour is then judged against the live producers' counts, not only the counts
    that travelled through the mirror (which stop with the data when the mirror stops)."""
    if not WITH_LOADER:
        pytest.skip("FERRY_ANSIBLE_LOADER=0: no loader host")
    hosts: DockerHosts = deployment["hosts"]
    code = ("import json, os; from ferry_dag_factory import load_config; "
            "print(json.dumps([g.live_zookeepers for g in load_config(os.environ['FERRY_DAGS_CONFIG'])]))")
    p = hosts.exec("offline-loader-1", "su", "-s", "/bin/sh", "ferry", "-c",
                   "set -a; . /etc/ferry/airflow.env; set +a; cd \"$AIRFLOW__CORE__DAGS_FOLDER\"; "
                   "/opt/ferry/venv/bin/python -c " + shlex.quote(code), check=False)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert p.returncode == 0, out[-3000:]
    groups = json.loads(out.strip().splitlines()[-1])
    assert groups and all(live == [LIVE_ZK] for live in groups), groups


STOP_MID_HOUR = b"""\
import dataclasses, json, os, sys, time, types
mode, args = sys.argv[1], sys.argv[2:]
if mode == "produce":  # N Avro events of one past hour into a live topic, its producer's counts to the live _audit
    from ferry.client.producer import Producer
    from ferry.schemas.registry import SchemaRegistry, subject_for_topic
    from ferry.schemas.wire import AvroSerializer
    from ferry.zk.cluster_registry import ClusterRegistry
    from ferry.wire.client_config import ClientConfig
    zk, topic, n, first, hour = args[0], args[1], int(args[2]), int(args[3]), int(args[4])
    config = ClientConfig.from_file(args[5])
    with ClusterRegistry(zk) as reg:
        if reg.topic(topic) is None:
            reg.create_topic(topic, 2, {}, replication_factor=2)
    schema = {"type": "record", "name": "StopMid", "namespace": "ferry.test", "fields": [{"name": "n", "type": "long"}]}
    with SchemaRegistry(zk) as sr:
        ser = AvroSerializer(sr, subject_for_topic(topic), schema)
        producer = Producer(zookeeper=zk, application="stopmid", audit_interval_s=1.0, client_config=config)
        for i in range(first, first + n):
            producer.send(topic, ser.serialize({"n": i}), None, timestamp_ms=hour + 1000 * i)
        print("RESULT", json.dumps({"undelivered": producer.close()}))
elif mode == "offline-count":  # wait until the offline copy of the topic holds N messages
    from confluent_kafka import Consumer, TopicPartition
    from ferry.wire.client_config import ClientConfig
    bootstrap, topic, n, deadline = args[0], args[1], int(args[2]), time.monotonic() + float(args[3])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "stopmid-count", "log_level": 3,
                  **ClientConfig.from_file(args[4]).librdkafka()})
    total = -1
    while time.monotonic() < deadline:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        total = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts) if parts else -1
        if total >= n:
            break
        time.sleep(1)
    c.close()
    print("RESULT", json.dumps({"offline": total}))
else:  # chain: the deployed DAG's tasks, in order, on the deployed configuration (its live_zookeepers)
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
    import datetime as dt
    import ferry_dag_factory as f
    from ferry.loaders.ledger import Ledger
    topic, database, state_dir, hour = args[0], args[1], args[2], int(args[3])
    (group, *_) = f.load_config(os.environ["FERRY_DAGS_CONFIG"])
    cfg = dataclasses.replace(group, name="stopmid", topics=[topic], database=database, state_dir=state_dir)
    start = dt.datetime.fromtimestamp(hour / 1000, dt.UTC)
    plan = f.plan_task(cfg, {"data_interval_start": start, "data_interval_end": start + f.HOUR,
                             "run_id": f"stopmid-{time.time()}"})
    f.load_task(cfg, plan)
    books = f.reconcile_task(cfg, plan)
    class Outlets(dict):  # Airflow's outlet_events: one event per Asset, its extra set by the task
        def __missing__(self, key):
            self[key] = types.SimpleNamespace(extra={})
            return self[key]
    try:
        published = f.publish_task(cfg, topic, plan, Outlets())
    except AirflowSkipException:
        published = "skipped"
    try:  # check_complete's look once its deadline has passed (lateness_minutes after the hour)
        checked = f.check_poke(cfg, dict(plan, check_deadline=0))[1]
    except AirflowFailException as e:
        checked = f"failed: {e}"
    table = f"{database}.{topic}"
    print("RESULT", json.dumps({"books": books, "publish": published, "check": checked,
                                "published": Ledger(state_dir).published_hours(table)}), flush=True)
"""


def test_deployed_dag_does_not_publish_an_hour_the_stopped_mirror_left_partial(deployment) -> None:
    """Issue 36: on the Ansible deployment, the mirror link copies part of an hour and is paused while the
    hour's producers go on; the deployed DAG's task chain (plan, load, reconcile, publish, check_complete), run on
    the loader host with the rendered ferry_dags.yaml, does not publish the hour: the live producers' counts say
    what is missing. With the link resumed the next run loads the rest and publishes the hour once."""
    if not WITH_LOADER:
        pytest.skip("FERRY_ANSIBLE_LOADER=0: no loader host")
    hosts: DockerHosts = deployment["hosts"]
    topic = database = "stopmid"
    hour_ms = (int(time.time()) // 3600 - 2) * 3_600_000
    label = time.strftime("%Y-%m-%dT%H", time.gmtime(hour_ms / 1000))

    def on_loader(*args: str, timeout: float = 300) -> dict:
        # the Airflow units' environment: airflow.env and the DAGs' connections (AIRFLOW_CONN_FERRY_*)
        command = ("set -a; . /etc/ferry/airflow.env; . /etc/ferry/airflow-connections.env; set +a; "
                   "cd \"$AIRFLOW__CORE__DAGS_FOLDER\"; "
                   "/opt/ferry/venv/bin/python - " + " ".join(shlex.quote(a) for a in args))
        p = hosts.exec("offline-loader-1", "su", "-s", "/bin/sh", "ferry", "-c", command, input=STOP_MID_HOUR,
                       timeout=timeout, check=False)
        out = (p.stdout + p.stderr).decode(errors="replace")
        assert p.returncode == 0, f"{args[0]}: rc={p.returncode}\n{out[-4000:]}"
        results = [ln for ln in p.stdout.decode(errors="replace").splitlines() if ln.startswith("RESULT ")]
        assert results, f"{args[0]}: no result line\n{out[-4000:]}"  # Spark and the load print lines of their own
        return json.loads(results[-1].removeprefix("RESULT "))

    # ops (a super user) makes the test's topic and produces into it; the chain logs in through the deployed
    # DAG's Airflow connections (the loader user of each cluster)
    ops = client_config(hosts, "offline-loader-1", deployment["secrets"], "ops", owner="ferry")
    t0 = time.monotonic()
    assert on_loader("produce", LIVE_ZK, topic, "300", "0", str(hour_ms), ops) == {"undelivered": 0}
    assert on_loader("offline-count", OFFLINE_BOOTSTRAP, topic, "300", "120", ops) == {"offline": 300}
    assert mirror_link(hosts, "pause", "live").returncode == 0
    link_partitions_state(hosts, "live", "paused")  # every offline leader saw it before more is produced
    try:
        assert on_loader("produce", LIVE_ZK, topic, "200", "300", str(hour_ms), ops) == {"undelivered": 0}
        first = on_loader("chain", topic, database, "/tmp/stopmid-state", str(hour_ms), timeout=900)
    finally:
        mirror_link(hosts, "resume", "live")
    day, hr = label.split("T")

    def book_of_the_hour(run: dict) -> dict:
        """The books of the hour produced into (a run's books also list the other hours it reconciled)."""
        found = [b for b in run["books"] if b["topic"] == topic and (b["dt"], b["hr"]) == (day, hr)]
        assert len(found) == 1, run
        return found[0]

    b = book_of_the_hour(first)
    assert (b["status"], b["produced"], b["loaded"], b["missing"], b["completeness"]) == \
        ("incomplete", 500, 300, 200, "live"), first
    assert first["publish"] == "skipped" and first["published"] == {}, first
    assert first["check"].startswith("failed: ") and "missing 200" in first["check"], first

    assert on_loader("offline-count", OFFLINE_BOOTSTRAP, topic, "500", "180", ops) == {"offline": 500}
    second = on_loader("chain", topic, database, "/tmp/stopmid-state", str(hour_ms), timeout=900)
    b = book_of_the_hour(second)
    assert (b["status"], b["produced"], b["loaded"]) == ("complete", 500, 500), second
    assert second["publish"] == [label] and second["published"] == {label: 500}, second
    assert second["check"] == f"{label} ok", second
    print(f"[ansible] stopped-mirror hour: {time.monotonic() - t0:.1f}s")


def test_deployed_hosts_run_the_native_parts(deployment) -> None:
    """The wheelhouse's ferry wheel carries its compiled parts and the hosts run them (no compiler on a host)."""
    hosts: DockerHosts = deployment["hosts"]
    roles = ["live-broker-1", "offline-broker-1"] + (["offline-loader-1"] if WITH_LOADER else [])
    for host in roles:
        out = hosts.exec(host, "/opt/ferry/venv/bin/ferry", "version").stdout.decode()
        parts = {ln.split()[1]: " ".join(ln.split()[2:]) for ln in out.splitlines() if ln.startswith("native ")}
        assert len(parts) == 7 and all(state == "on" for state in parts.values()), f"{host}: {out}"
    assert hosts.exec("live-broker-1", "sh", "-c", "command -v gcc cc", check=False).returncode != 0, \
        "the test hosts have a C compiler: the check would not show that the wheel brought the parts"


SPARK_COUNT = b"""\
import json, sys
from ferry.loaders.session import build_session
spark = build_session(sys.argv[1], master="local[1]", warehouse=sys.argv[2])
r = spark.sql(f"SELECT count(*) AS n, count(DISTINCT _partition, _offset) AS d FROM {sys.argv[3]}").collect()[0]
print("RESULT " + json.dumps({"rows": r.n, "distinct": r.d}))
"""


def test_spark_role_runs_a_load_on_both_workers(deployment) -> None:
    """spark.yml (in site.yml) on the deployment: a Spark standalone master on the loader host and a worker on each
    spark_workers host (the loader and offline-spark-1), systemd units running the PySpark of ferry's virtualenv.
    Checked: the units are active, the master lists both workers ALIVE with the inventory's cores and memory, its
    recovery directory holds them (FILESYSTEM recovery), the REST submission port is closed, and a `ferry load
    --master spark://...` over SASL_SSL runs its splits on both workers' executors, which write into the warehouse
    volume both hosts mount: every row once (counted again through the PostgreSQL metastore). site.yml's second run
    (test_second_run_changes_nothing) checks the role's idempotence."""
    if not WITH_LOADER:
        pytest.skip("FERRY_ANSIBLE_LOADER=0: no loader host")
    hosts: DockerHosts = deployment["hosts"]
    loader, worker = SPARK_WORKERS
    for host, unit in ((loader, "ferry-spark-master"), (loader, "ferry-spark-worker"), (worker, "ferry-spark-worker")):
        state = hosts.exec(host, "systemctl", "is-active", unit, check=False).stdout.decode().strip()
        assert state == "active", f"{unit} on {host}: {state}"

    def python(code: str) -> str:
        p = hosts.exec(loader, "/opt/ferry/venv/bin/python", "-c", code, check=False)
        assert p.returncode == 0, (p.stdout + p.stderr).decode(errors="replace")[-3000:]
        return p.stdout.decode()

    master = json.loads(python(f"import urllib.request, sys; sys.stdout.write(urllib.request.urlopen("
                               f"'http://{loader}:8090/json/', timeout=10).read().decode())"))
    alive = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert sorted(w["host"] for w in alive) == sorted(SPARK_WORKERS), master["workers"]
    assert all(w["cores"] == 1 and w["memory"] == 1024 for w in alive), alive
    recovery = hosts.exec(loader, "ls", "/var/lib/ferry/spark/recovery").stdout.decode().split()
    assert sum(f.startswith("worker_") for f in recovery) == 2, recovery
    refused = python(f"import socket\ntry:\n    socket.create_connection(('{loader}', 6066), 5)\n"
                     "except ConnectionRefusedError:\n    print('refused')")
    assert refused.strip() == "refused", "the REST submission server must be off"

    def as_ferry(command: str, timeout: float = 300, stdin: bytes | None = None) -> str:
        # the loads' environment (airflow.env): the offline ZooKeeper, the loader's client file, the metastore
        p = hosts.exec(loader, "su", "-s", "/bin/sh", "ferry", "-c",
                       "set -a; . /etc/ferry/airflow.env; set +a; cd /tmp; " + command, timeout=timeout,
                       check=False, input=stdin)
        out = (p.stdout + p.stderr).decode(errors="replace")
        assert p.returncode == 0, f"{command}: rc={p.returncode}\n{out[-4000:]}"
        return out

    n = 4000
    ops = client_config(hosts, loader, deployment["secrets"], "ops", owner="ferry")  # a super user: a new topic
    assert f"produced {n}" in as_ferry(f"python - \"$FERRY_ZOOKEEPER\" sparkcheck {n} {ops}",
                                       stdin=SQL_CHECK_PRODUCE)
    out = as_ferry("ferry load --topics sparkcheck --state-dir /tmp/sc-state --warehouse \"$FERRY_WAREHOUSE\" "
                   f"--database sc --max-per-split 250 --no-audit --master spark://{loader}:7077 "
                   f"--json /tmp/sc.json --conf spark.driver.host={loader} --conf spark.executor.memory=512m "
                   "--conf spark.driver.memory=512m --conf spark.scheduler.minRegisteredResourcesRatio=1.0 "
                   "--conf spark.ui.showConsoleProgress=false", timeout=900)
    result = json.loads(hosts.exec(loader, "cat", "/tmp/sc.json").stdout)
    assert result["committed"] and result["rows"] == n, out[-3000:]
    assert "tasks ran on 2 worker(s)" in out, out[-3000:]
    ran = {e["host"] for e in result["executors"] if e["tasks"]}
    assert len(ran) == 2, result["executors"]
    count = as_ferry("python - /tmp/sc-state \"$FERRY_WAREHOUSE\" sc.sparkcheck", stdin=SPARK_COUNT)
    line = next(x for x in count.splitlines() if x.startswith("RESULT "))
    assert json.loads(line[len("RESULT "):]) == {"rows": n, "distinct": n}
    # the worker host wrote into the same volume: its view of the table has the run's files
    files = hosts.exec(worker, "sh", "-c", f"find {WAREHOUSE}/sc* -name '*.parquet' | wc -l").stdout.decode()
    assert int(files.strip()) > 0


def test_second_run_changes_nothing(deployment) -> None:
    p, totals = deployment["play"]("site.yml")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    changed = {h: c["changed"] for h, c in totals.items() if c.get("changed")}
    assert not changed, f"second run changed {changed}:\n" + "\n".join(changed_tasks(p.stdout))


def test_rolling_restart_one_broker_at_a_time(deployment) -> None:
    hosts: DockerHosts = deployment["hosts"]

    def unit_times(host: str) -> dict[str, int]:
        """systemd's realtime stamps (µs) of the broker unit's last start and stop."""
        out = hosts.exec(host, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "-p",
                         "InactiveEnterTimestampMonotonic", "ferry-broker").stdout.decode()
        return {k: int(v) for k, v in (line.split("=", 1) for line in out.split())}

    def registered_at() -> dict[int, int]:
        """ctime (ms) of each live broker's ephemeral /brokers/ids/<id> znode."""
        code = ("import json,kazoo.client as k; from ferry.zk.zk_tls import ZkTlsConfig; "
                f"z=k.KazooClient('{LIVE_ZK}', **ZkTlsConfig.from_file('{ZK_TLS_CONFIG}').kazoo_arguments()); "
                "z.start(10); "
                "print(json.dumps({i: z.get('/brokers/ids/'+i)[1].ctime for i in z.get_children('/brokers/ids')}))")
        out = hosts.exec("live-zk-1", "/opt/ferry/venv/bin/python", "-c", code).stdout.decode()
        return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}

    def boot_offset_us(host: str) -> int:
        """realtime - monotonic, to compare systemd's monotonic stamps with ZooKeeper's wall clock."""
        out = hosts.exec(host, "python3", "-c", "import time; print(int((time.time() - time.monotonic()) * 1e6))")
        return int(out.stdout.decode().strip())

    brokers = {1: "live-broker-1", 2: "live-broker-2"}
    before = {i: unit_times(h) for i, h in brokers.items()}
    p, totals = deployment["play"]("rolling_restart.yml", "-l", "live_brokers")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    # live-broker-1: its restart, then the preferred leader election (broker 2's controlled shutdown had
    # moved every leadership to broker 1) unless the controller's rebalance timer (300 s) did it just before;
    # live-broker-2: its restart
    assert totals["live-broker-1"]["changed"] in (1, 2) and totals["live-broker-2"]["changed"] == 1, totals
    assert p.stdout.count("TASK [broker : Wait until no partition of the datacenter is under-replicated]") == 4
    for topic in describe(hosts, "live-broker-1", LIVE_ZK):
        for part in topic["partitions"]:
            assert sorted(part["isr"]) == sorted(part["replicas"]), topic
            assert part["leader"] == part["replicas"][0], topic  # preferred leaders again
    after = {i: unit_times(h) for i, h in brokers.items()}
    for i in brokers:
        assert after[i]["ActiveEnterTimestampMonotonic"] > before[i]["ActiveEnterTimestampMonotonic"], (before, after)
    # serial: 1 with a readiness wait: broker 1 had registered again before broker 2 was stopped.
    reg = registered_at()
    offset = boot_offset_us("live-broker-2")
    broker2_stopped_ms = (after[2]["InactiveEnterTimestampMonotonic"] + offset) / 1000
    assert reg[1] < broker2_stopped_ms, (reg, broker2_stopped_ms)
    assert p.stdout.count("PLAY [Rolling restart of the brokers]") == 2
    # The pipeline still works after the restart.
    producer = client_config(hosts, "live-broker-2", deployment["secrets"], "producer")
    ops = client_config(hosts, "offline-broker-1", deployment["secrets"], "ops")
    sent = probe(hosts, "live-broker-2", "produce", "--bootstrap", LIVE_BOOTSTRAP, "--config", producer,
                 "--topic", "page_view", "--count", "200", "--prefix", "ansible2")
    assert sent["failed"] == 0
    got = probe(hosts, "offline-broker-1", "count", "--bootstrap", OFFLINE_BOOTSTRAP, "--config", ops,
                "--topic", "page_view", "--prefix", "ansible2", "--expect", "200", "--timeout", "120")
    assert got["distinct"] == 200, got


def test_new_ferry_build_restarts_the_broker(deployment, tmp_path: Path) -> None:
    """A changed wheelhouse (a new ferry build) is reinstalled and restarts the services running ferry."""
    import tarfile

    hosts: DockerHosts = deployment["hosts"]
    src = ROOT / "infra" / "images" / "build" / "wheelhouse.tar"
    changed = tmp_path / "wheelhouse.tar"
    changed.write_bytes(src.read_bytes())
    note = tmp_path / "BUILD-NOTE"
    note.write_text("a rebuilt wheelhouse\n")
    with tarfile.open(changed, "a") as tar:
        tar.add(note, arcname="./BUILD-NOTE")

    def started(host: str) -> int:
        out = hosts.exec(host, "systemctl", "show", "-p", "ActiveEnterTimestampMonotonic", "ferry-broker").stdout
        return int(out.decode().strip().split("=", 1)[1])

    before = {h: started(h) for h in ("live-broker-1", "live-broker-2")}
    p, totals = deployment["play"]("brokers.yml", "-l", "live-broker-1", "-e", f"ferry_wheelhouse={changed}")
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-3000:]
    assert "RUNNING HANDLER [broker : Restart broker]" in p.stdout
    assert started("live-broker-1") > before["live-broker-1"]
    assert started("live-broker-2") == before["live-broker-2"], "only the targeted host was touched"
    assert hosts.exec("live-broker-1", "test", "-f", "/opt/ferry/wheels/BUILD-NOTE", check=False).returncode == 0


ZK_OVER_TLS = """\
import json, sys
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
hosts, ca, password = sys.argv[1], sys.argv[2], sys.stdin.read().strip()
out = {}
plain = KazooClient(hosts=hosts)  # no TLS on the TLS port: the server's handshake never completes a session
try:
    plain.start(5); out["plain"] = "session"
except KazooTimeoutError:
    out["plain"] = "refused"
finally:
    plain.stop(); plain.close()
zk = KazooClient(hosts=hosts, use_ssl=True, verify_certs=True, ca=ca, auth_data=[("digest", "ferry:" + password)])
zk.start(15)
data, _ = zk.get("/config/users/ops")  # digest-locked: readable only by ferry's identity
out["read_users"] = "SCRAM-SHA-512" in data.decode()
zk.stop(); zk.close()
print(json.dumps(out))
"""


def test_zookeeper_serves_other_hosts_only_over_tls(deployment) -> None:
    """ZooKeeper over TLS by default (ferry_security sasl_ssl): from another host, a client without TLS on 2281 gets
    no session and ferry's tools say why (one line, non-zero exit); kazoo with the controller's CA (beside the
    inventory) and ferry's digest credentials reads a locked znode; the plaintext port answers only on the
    ZooKeeper host's loopback."""
    hosts: DockerHosts = deployment["hosts"]
    secrets: Path = deployment["secrets"]
    hosts.exec("live-broker-2", "sh", "-c", "cat > /tmp/deployment-ca.pem",
               input=(secrets / "tls" / "ca.pem").read_bytes())
    password = (secrets / "passwords" / "zookeeper-ferry").read_text().strip()
    out = hosts.exec("live-broker-2", "/opt/ferry/venv/bin/python", "-c", ZK_OVER_TLS, LIVE_ZK,
                     "/tmp/deployment-ca.pem", input=password.encode(), timeout=120).stdout.decode()
    assert json.loads(out.strip().splitlines()[-1]) == {"plain": "refused", "read_users": True}, out
    tool = hosts.exec("live-broker-2", "env", "-u", "FERRY_ZOOKEEPER_TLS_CONFIG", "/opt/ferry/venv/bin/ferry",
                      "topics", "list", "--zookeeper", LIVE_ZK, check=False, timeout=120)
    err = tool.stderr.decode(errors="replace").strip()
    assert tool.returncode != 0 and "speaks TLS" in err and "Traceback" not in err and len(err.splitlines()) == 1, err
    reach = "import socket, sys; socket.create_connection((sys.argv[1], 2181), 3).close()"
    for zk_host, other in (("live-zk-1", "live-broker-2"), ("offline-zk-1", "offline-loader-1")):
        assert hosts.exec(other, "python3", "-c", reach, zk_host, check=False).returncode != 0, \
            f"{zk_host}:2181 (plaintext) is reachable from {other}"
        assert hosts.exec(zk_host, "python3", "-c", reach, "127.0.0.1", check=False).returncode == 0, \
            f"{zk_host}'s plaintext port does not answer on its loopback"
        assert hosts.exec(other, "python3", "-c", reach.replace("2181", "2281"), zk_host,
                          check=False).returncode == 0, f"{zk_host}:2281 (TLS) is not reachable from {other}"
