"""`ferry broker` settings: flags, a Kafka-style --config file, clear errors with exit code 2, and a clean
SIGTERM shutdown of a broker configured from a file."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys

import pytest

from ferry.broker.cli import build_config
from ferry.broker.server.authorizer_config import AuthorizerConfig
from ferry.broker.server.broker_config import BrokerConfig, ConfigError
from ferry.cli import build_parser
from ferry.embedded import free_port, wait_for_port
from ferry.wire.log_config import LogConfig

BASE = ["--id", "3", "--listen", "127.0.0.1:9092", "--data-dir", "/tmp/d", "--zookeeper", "zk:2181/ferry/live",
        "--datacenter", "live"]


def _config(argv: list[str]) -> BrokerConfig:
    args = build_parser("broker").parse_args(["broker", *argv])
    return build_config(args)


def _run_cli(argv: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ferry.cli", "broker", *argv], capture_output=True, text=True,
                          timeout=timeout)


def test_flags_build_the_config():
    cfg = _config([*BASE, "--advertised", "broker3.example:19092", "--log-segment-bytes", "1048576",
                   "--retention-ms", "3600000", "--retention-bytes", "5000000", "--flush-messages", "50",
                   "--flush-ms", "25", "--max-message-bytes", "2000000", "--max-request-bytes", "5000000",
                   "--auto-create-topics", "--num-partitions", "3"])
    assert (cfg.broker_id, cfg.listen_host, cfg.listen_port) == (3, "127.0.0.1", 9092)
    assert (cfg.advertised_host, cfg.advertised_port) == ("broker3.example", 19092)
    assert cfg.zookeeper == "zk:2181/ferry/live" and cfg.datacenter == "live"
    assert cfg.log.segment_bytes == 1048576 and cfg.log.retention_ms == 3600000
    assert cfg.log.retention_bytes == 5000000 and cfg.log.flush_interval_messages == 50
    assert cfg.log.flush_interval_ms == 25 and cfg.log.max_message_bytes == 2000000
    assert cfg.max_request_bytes == 5000000 and cfg.auto_create_topics and cfg.num_partitions == 3
    plain = _config(BASE)
    assert plain.advertised == "127.0.0.1:9092" and not plain.auto_create_topics
    assert plain.max_request_bytes == 100 * 1024 * 1024


def test_config_file_with_flag_overrides(tmp_path):
    f = tmp_path / "broker.properties"
    f.write_text("# a Kafka-style file\nbroker.id=7\nlisteners=PLAINTEXT://127.0.0.1:9999\nlog.dirs=/data/k\n"
                 "zookeeper.connect=z:2181/ferry/offline\nbroker.rack=offline\nlog.retention.hours=2\n"
                 "log.flush.interval.ms: 30\n")
    cfg = _config(["--config", str(f), "--id", "8"])
    assert cfg.broker_id == 8 and cfg.listen_port == 9999 and str(cfg.data_dir) == "/data/k"
    assert cfg.datacenter == "offline" and cfg.log.retention_ms == 2 * 3600_000 and cfg.log.flush_interval_ms == 30


@pytest.mark.parametrize("line, check", [
    ("log.message.timestamp.type=LogAppendTime", lambda c: c.log.log_append_time is True),
    ("producer.id.expiration.ms=60000", lambda c: c.log.producer_id_expiration_ms == 60_000),
    ("connections.max.idle.ms=5000", lambda c: c.connections_max_idle_ms == 5_000),
])
def test_config_file_settings(tmp_path, line, check):
    f = tmp_path / "broker.properties"
    f.write_text(f"{line}\n")
    assert check(_config(["--config", str(f), *BASE]))


@pytest.mark.parametrize("line, message", [
    ("log.message.timestamp.type=WallClock", "log.message.timestamp.type"),
    ("producer.id.expiration.ms=0", "producer.id.expiration.ms"),
])
def test_bad_config_file_values_exit_2(tmp_path, line, message):
    f = tmp_path / "bad.properties"
    f.write_text(f"{line}\n")
    r = _run_cli(["--config", str(f), *BASE])
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("argv, message", [
    (BASE[2:], "broker.id"),
    ([*BASE, "--log-segment-bytes", "5"], "segment.bytes"),
    ([*BASE, "--flush-messages", "0"], "flush"),
    ([*BASE, "--max-request-bytes", "10"], "socket.request.max.bytes"),
    ([*BASE, "--connections-max-idle-ms", "0"], "connections.max.idle.ms"),
    ([*BASE[:2], "--listen", "nowhere", *BASE[4:]], "listeners"),
    ([*BASE[:2], "--listen", "127.0.0.1:70000", *BASE[4:]], "port"),
    ([*BASE, "--advertised", "SSL://h:1"], "PLAINTEXT"),
    ([*BASE, "--id", "-1"], "broker.id"),
])
def test_bad_settings_exit_2_naming_the_setting(argv, message):
    r = _run_cli(argv)
    assert r.returncode == 2, r
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_bad_config_file_exits_2(tmp_path):
    f = tmp_path / "bad.properties"
    f.write_text("broker.id=1\nlisteners=127.0.0.1:1\nlog.dirs=/x\nzookeeper.connect=z:1/c\ndatacenter=a\n"
                 "log.retentoin.ms=5\n")
    r = _run_cli(["--config", str(f)])
    assert r.returncode == 2 and "log.retentoin.ms" in r.stderr
    r = _run_cli(["--config", str(tmp_path / "missing.properties")])  # a file missing at run time: exit 1
    assert r.returncode == 1 and "No such file or directory" in r.stderr and "missing.properties" in r.stderr
    r = _run_cli([*BASE[:2], "--id", "abc"])
    assert r.returncode == 2 and "invalid int value" in r.stderr


def test_help_documents_every_flag():
    r = _run_cli(["--help"])
    assert r.returncode == 0
    parser = build_parser("broker")
    sub = parser._subparsers._group_actions[0].choices["broker"]  # type: ignore[union-attr]
    for action in sub._actions:
        if action.help == argparse.SUPPRESS:  # an older spelling kept as a hidden alias (--metrics-port)
            continue
        for opt in action.option_strings:
            assert opt in r.stdout
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings} has no help text"


def test_help_names_every_api_the_broker_answers():
    """The description lists the APIs from the table ApiVersions advertises, so it cannot go stale."""
    text = " ".join(_run_cli(["--help"]).stdout.split())
    for name in ("ApiVersions", "Produce", "Fetch", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "DescribeLogDirs",
                 "IncrementalAlterConfigs", "DeleteGroups"):
        assert name in text, name


def test_broker_from_config_file_starts_and_stops_cleanly_on_sigterm(zk_connect, tmp_path):
    port = free_port()
    f = tmp_path / "b.properties"
    f.write_text(f"broker.id=4\nlisteners=127.0.0.1:{port}\nlog.dirs={tmp_path / 'data'}\n"
                 f"zookeeper.connect={zk_connect}\ndatacenter=live\n")
    out = open(tmp_path / "out.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "ferry.cli", "broker", "--config", str(f)], stdout=out,
                            stderr=subprocess.STDOUT)
    try:
        wait_for_port("127.0.0.1", port, 30, proc, tmp_path / "out.log")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        out.close()
    text = (tmp_path / "out.log").read_text()
    assert "registered in ZooKeeper" in text and "logs flushed and closed" in text and "broker 4 stopped" in text


# ---------------------------------------------------------------------------- replication settings
REQUIRED = {"broker.id": "1", "listeners": "127.0.0.1:9092", "log.dirs": "/tmp/d", "zookeeper.connect": "z:1/c",
            "datacenter": "live"}


def test_replication_settings_have_kafkas_defaults():
    cfg = BrokerConfig.from_properties(REQUIRED)
    assert cfg.default_replication_factor == 1 and cfg.min_insync_replicas == 1
    assert cfg.log.min_insync_replicas == 1 and cfg.unclean_leader_election_enable is False
    assert (cfg.replica_lag_time_max_ms, cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_max_bytes,
            cfg.replica_fetch_min_bytes, cfg.replica_socket_timeout_ms) == (30_000, 500, 1_048_576, 1, 30_000)
    assert cfg.auto_leader_rebalance_enable is True and cfg.leader_imbalance_check_interval_seconds == 300
    assert (cfg.controlled_shutdown_enable, cfg.controlled_shutdown_max_retries,
            cfg.controlled_shutdown_retry_backoff_ms) == (True, 3, 5_000)
    assert cfg.request_timeout_ms == 30_000


def test_replication_settings_from_a_file(tmp_path):
    f = tmp_path / "broker.properties"
    f.write_text("default.replication.factor=3\nmin.insync.replicas=2\nreplica.lag.time.max.ms=10000\n"
                 "replica.fetch.wait.max.ms=100\nreplica.fetch.max.bytes=2097152\nreplica.fetch.min.bytes=10\n"
                 "replica.socket.timeout.ms=5000\nunclean.leader.election.enable=true\n"
                 "auto.leader.rebalance.enable=false\nleader.imbalance.check.interval.seconds=30\n"
                 "controlled.shutdown.enable=false\ncontrolled.shutdown.max.retries=5\n"
                 "controlled.shutdown.retry.backoff.ms=100\nrequest.timeout.ms=15000\n")
    cfg = _config(["--config", str(f), *BASE])
    assert cfg.default_replication_factor == 3 and cfg.min_insync_replicas == 2
    assert cfg.unclean_leader_election_enable is True and cfg.log.unclean_leader_election_enable is True
    assert (cfg.replica_lag_time_max_ms, cfg.replica_fetch_wait_max_ms, cfg.replica_fetch_max_bytes,
            cfg.replica_fetch_min_bytes, cfg.replica_socket_timeout_ms) == (10_000, 100, 2_097_152, 10, 5_000)
    assert cfg.auto_leader_rebalance_enable is False and cfg.leader_imbalance_check_interval_seconds == 30
    assert (cfg.controlled_shutdown_enable, cfg.controlled_shutdown_max_retries,
            cfg.controlled_shutdown_retry_backoff_ms) == (False, 5, 100)
    assert cfg.request_timeout_ms == 15_000


@pytest.mark.parametrize("key, value, message", [
    ("default.replication.factor", "0", "default.replication.factor: 0 must be at least 1"),
    ("default.replication.factor", "three", "default.replication.factor: expected an integer"),
    ("min.insync.replicas", "0", "min.insync.replicas: 0 is out of range"),
    ("min.insync.replicas", "x", "min.insync.replicas: expected an integer"),
    ("unclean.leader.election.enable", "maybe", "unclean.leader.election.enable: expected true or false"),
    ("auto.leader.rebalance.enable", "2", "auto.leader.rebalance.enable: expected true or false"),
    ("controlled.shutdown.enable", "on", "controlled.shutdown.enable: expected true or false"),
    ("replica.lag.time.max.ms", "0", "replica.lag.time.max.ms: 0 must be at least 1"),
    ("replica.fetch.wait.max.ms", "-1", "replica.fetch.wait.max.ms: -1 must be at least 0"),
    ("replica.fetch.wait.max.ms", "40000", "replica.socket.timeout.ms (30000) must be at least"),
    ("replica.socket.timeout.ms", "100", "replica.socket.timeout.ms (100) must be at least"),
    ("replica.lag.time.max.ms", "200", "must be at most replica.lag.time.max.ms (200)"),
    ("leader.imbalance.check.interval.seconds", "0", "leader.imbalance.check.interval.seconds"),
    ("controlled.shutdown.max.retries", "-1", "controlled.shutdown.max.retries"),
    ("request.timeout.ms", "0", "request.timeout.ms: 0 must be at least 1"),
    # the ACL settings (AuthorizerConfig)
    ("authorizer.class.name", "com.example.Nope", "authorizer.class.name: 'com.example.Nope' is not an authorizer"),
    ("super.users", "User:admin;broker", "super.users: 'broker' is not TYPE:NAME"),
    ("super.users", "User:", "super.users: 'User:' is not TYPE:NAME"),
    ("allow.everyone.if.no.acl.found", "sometimes", "allow.everyone.if.no.acl.found: expected true or false"),
])
def test_bad_settings_name_the_setting(key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig.from_properties({**REQUIRED, key: value})


def test_bad_replication_setting_exits_2(tmp_path):
    f = tmp_path / "bad.properties"
    f.write_text("default.replication.factor=0\n")
    r = _run_cli(["--config", str(f), *BASE])
    assert r.returncode == 2 and "default.replication.factor" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_topic_overrides_of_the_replication_settings():
    broker = BrokerConfig.from_properties({**REQUIRED, "min.insync.replicas": "2",
                                           "unclean.leader.election.enable": "true"})
    inherited = LogConfig.from_topic_config({"retention.ms": "1000"}, broker.log)
    assert inherited.min_insync_replicas == 2 and inherited.unclean_leader_election_enable is True
    topic = LogConfig.from_topic_config({"min.insync.replicas": "3", "unclean.leader.election.enable": "false"},
                                        broker.log)
    assert topic.min_insync_replicas == 3 and topic.unclean_leader_election_enable is False
    assert LogConfig().min_insync_replicas == 1 and LogConfig().unclean_leader_election_enable is False
    for config, message in [({"min.insync.replicas": "0"}, "min.insync.replicas: 0 is out of range"),
                            ({"min.insync.replicas": "two"}, "min.insync.replicas: expected an integer"),
                            ({"unclean.leader.election.enable": "yes"}, "unclean.leader.election.enable: expected")]:
        with pytest.raises(ValueError, match=re.escape(message)):
            LogConfig.from_topic_config(config)


def test_metrics_listen_and_the_older_metrics_port():
    parser = build_parser("broker")
    base = ["broker", "--id", "1", "--listen", "127.0.0.1:9092", "--data-dir", "/tmp/x", "--zookeeper", "z:1/c",
            "--datacenter", "live"]
    cfg = build_config(parser.parse_args([*base, "--metrics-listen", "0.0.0.0:9404"]))
    assert (cfg.metrics_host, cfg.metrics_port) == ("0.0.0.0", 9404)
    cfg = build_config(parser.parse_args([*base, "--metrics-port", "9405"]))
    assert (cfg.metrics_host, cfg.metrics_port) == ("127.0.0.1", 9405)


def test_acl_settings_are_off_unless_asked():
    cfg = BrokerConfig.from_properties(REQUIRED).authorizer
    assert cfg == AuthorizerConfig() and not cfg.enabled
    assert (cfg.super_users, cfg.allow_everyone_if_no_acl_found) == ((), False)


@pytest.mark.parametrize("name", ["ferry", "kafka.security.authorizer.AclAuthorizer",
                                  "kafka.security.auth.SimpleAclAuthorizer"])
def test_acl_settings_from_a_brokers_properties(name):
    cfg = BrokerConfig.from_properties({**REQUIRED, "authorizer.class.name": name,
                                        "super.users": " User:admin; User:broker ;",
                                        "allow.everyone.if.no.acl.found": "yes"}).authorizer
    assert cfg.enabled and cfg.class_name == name
    assert cfg.super_users == ("User:admin", "User:broker") and cfg.allow_everyone_if_no_acl_found is True
