"""Hourly warehouse-load DAGs generated from ``ferry_dags.yaml`` (one DAG per topic group).

    plan ─► load ─► reconcile ─┬─► publish_<table> (one per table: Asset event for newly complete hours)
                               └─► check_complete (sensor: waits for the hour, fails after its lateness)

- ``plan`` fixes the end offsets (a retried ``load`` reads the same ranges) and the hours to judge;
- ``load`` is a committed load run: in-process Spark (local) by default, ``SparkSubmitOperator`` on
  ``spark_conn_id`` when the group configures one;
- ``reconcile`` loads `_audit` once more and balances the books (ferry_completeness) against the
  producers' counts as the live clusters (``live_zookeepers``) know them: an hour the mirror has not
  fully brought over is incomplete; while a live cluster is unreachable every hour is ``unknown``;
- ``publish_<table>`` records the table's newly complete hours in the ledger and emits an Asset event
  (extra: the hours; ``revised`` for an hour published before with another row count) for analysts'
  DAGs; with nothing new it is skipped (no event);
- ``check_complete`` is a sensor in reschedule mode (no worker slot held while it waits): it judges the
  run's hour from fresh books (offline `_audit` + the live clusters' producer counts, no Spark) every
  ``check_poke_s`` until the hour is complete, and fails once ``lateness_minutes`` after the hour's end
  have passed, naming what is missing (or which live cluster could not be read). No
  ``depends_on_past``: later hours go on (several runs may wait at once).

Secured clusters: ``kafka_conn_id`` (offline) and ``live_kafka_conn_id`` name Airflow connections (type
``kafka``, as the apache-kafka provider's) whose extra holds librdkafka's client properties
(``security.protocol``, ``sasl.*``, ``ssl.*``). A task writes them at run time to a 0600 file in the state
directory (client_files.py) and hands the load its path: the password stays in Airflow's connection, never in
a rendered template field, a command line or a log line.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import ferry.loaders.cli
from ferry.audit.completeness import books
from ferry.audit.live import read_live_counts
from ferry.audit.reader import read_audit_events
from ferry.loaders import steps
from ferry.loaders.ledger import Ledger
from ferry.loaders.load_config import LoadConfig
from ferry.loaders.naming import table_for_topic
from ferry.loaders.offsets import offsets_json, parse_offsets_json
from ferry.loaders.sql_metastore import parse
from ferry.wire.client_config import ClientConfig

# Airflow is imported where a DAG or a task needs it, so that the configuration and the books' logic load
# (and are tested) without it; the ferry modules above are light (Spark only starts inside a load)

log = logging.getLogger("ferry.dags")

HERE = Path(__file__).resolve().parent
CONFIG_ENV = "FERRY_DAGS_CONFIG"
DEFAULT_CONFIG = HERE / "ferry_dags.yaml"
HOUR = dt.timedelta(hours=1)


class DagConfigError(ValueError):
    pass


@dataclass
class GroupConfig:
    name: str
    topics: list[str]
    zookeeper: str
    state_dir: str
    warehouse: str | None = None
    database: str = "ferry"
    # the Hive metastore (loaders/sql_metastore.py): postgresql://USER@HOST/DB lets analysts query while loads
    # run; None: $FERRY_METASTORE of the Airflow process, else the embedded Derby in state_dir
    metastore: str | None = None
    schedule: str = "@hourly"
    start_date: dt.datetime = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    catchup: bool = False
    lateness_minutes: int = 120
    spark_conn_id: str | None = None  # None: Spark in-process (local mode); else SparkSubmitOperator
    master: str = "local[2]"
    max_per_split: int = 1_000_000
    start: str = "earliest"
    retries: int = 3
    retry_delay_s: int = 300
    max_retry_delay_s: int = 3600
    spark_conf: dict[str, str] = field(default_factory=dict)
    python: str = sys.executable  # the interpreter Spark's Python workers run (PYSPARK_PYTHON)
    pool: str | None = None  # Airflow pool of the Spark tasks (1 slot: groups sharing a Derby metastore)
    tags: list[str] = field(default_factory=list)
    # the live clusters whose producers' counts decide completeness (one per frontend datacenter)
    live_zookeepers: list[str] = field(default_factory=list)
    # "live" (the default: live_zookeepers required) or "offline-only": judged from the counts that reached the
    # offline cluster, said so on every hour published (a stopped mirror would make a partial hour look complete)
    completeness: str = "live"
    check_poke_s: int = 300  # how often check_complete re-reads the books while it waits
    # Airflow connections (extra: librdkafka client properties) of the offline and the live clusters' brokers;
    # None: plaintext
    kafka_conn_id: str | None = None
    live_kafka_conn_id: str | None = None

    @property
    def dag_id(self) -> str:
        return f"ferry_load_{self.name}"

    def load_config(self, **overrides: object) -> LoadConfig:
        """The load's settings; the client files are (re)written from the connections here, at run time."""
        kw: dict[str, Any] = dict(zookeeper=self.zookeeper, topics=list(self.topics), state_dir=self.state_dir,
                                  warehouse=self.warehouse, database=self.database, master=self.master,
                                  metastore_uris=self.metastore, start=self.start, max_per_split=self.max_per_split,
                                  spark_conf=dict(self.spark_conf), live_zookeepers=list(self.live_zookeepers),
                                  client_config=client_file(self.kafka_conn_id, self.state_dir),
                                  live_client_config=client_file(self.live_kafka_conn_id, self.state_dir))
        kw.update(overrides)
        return LoadConfig(**kw)

    def offline_client(self) -> ClientConfig:
        path = client_file(self.kafka_conn_id, self.state_dir)
        return ClientConfig.from_file(path) if path else ClientConfig.plaintext()

    def live_client(self) -> ClientConfig:
        path = client_file(self.live_kafka_conn_id, self.state_dir)
        return ClientConfig.from_file(path) if path else ClientConfig.plaintext()


def _parse_time(value: Any, what: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, dt.date):
        t = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            raise DagConfigError(f"{what}: {value!r} is not an ISO date/time") from None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


COMPLETENESS_SOURCES = ("live", "offline-only")


def _completeness_source(path: Path, name: str, value: object, live: list[str]) -> str:
    """Completeness from the live producers' counts is the only default: a group without live clusters is
    refused unless it says ``completeness: offline-only`` (counts that travelled through the mirror stop with the
    data when the mirror stops, so a partial hour would balance)."""
    source = "live" if value is None else str(value)
    if source not in COMPLETENESS_SOURCES:
        raise DagConfigError(f"{path}: group {name!r}: completeness must be one of {', '.join(COMPLETENESS_SOURCES)}")
    if source == "live" and not live:
        raise DagConfigError(f"{path}: group {name!r}: no live_zookeepers: completeness is judged from the live "
                             "producers' counts; name every live cluster, or say 'completeness: offline-only'")
    if source == "offline-only" and live:
        raise DagConfigError(f"{path}: group {name!r}: completeness: offline-only with live_zookeepers set")
    return source


def load_config(path: str | os.PathLike | None = None) -> list[GroupConfig]:
    """Groups from the YAML (or JSON) file; ``defaults`` apply to every group. Errors name the key."""
    path = Path(path or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise DagConfigError(f"{path}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise DagConfigError(f"{path}: expected a mapping with a 'groups' list")
    defaults = doc.get("defaults") or {}
    known = set(GroupConfig.__dataclass_fields__)
    groups, seen = [], set()
    for i, raw in enumerate(doc["groups"]):
        if not isinstance(raw, dict):
            raise DagConfigError(f"{path}: groups[{i}] must be a mapping")
        merged = {**defaults, **raw}
        unknown = sorted(set(merged) - known)
        if unknown:
            raise DagConfigError(f"{path}: groups[{i}]: unknown key(s) {', '.join(unknown)}")
        for required in ("name", "topics", "zookeeper", "state_dir"):
            if not merged.get(required):
                raise DagConfigError(f"{path}: groups[{i}] needs {required!r}")
        if not re.fullmatch(r"[A-Za-z0-9_]+", str(merged["name"])):
            raise DagConfigError(f"{path}: group name {merged['name']!r}: letters, digits and _ only")
        if merged["name"] in seen:
            raise DagConfigError(f"{path}: group {merged['name']!r} appears twice")
        seen.add(merged["name"])
        topics = merged["topics"]
        if isinstance(topics, str):
            topics = [t.strip() for t in topics.split(",") if t.strip()]
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise DagConfigError(f"{path}: group {merged['name']!r}: topics must be a list of topic names")
        merged["topics"] = topics
        live = merged.get("live_zookeepers") or []
        if isinstance(live, str):
            live = [z.strip() for z in live.split(",") if z.strip()]
        if not isinstance(live, list) or not all(isinstance(z, str) and z for z in live):
            raise DagConfigError(f"{path}: group {merged['name']!r}: live_zookeepers must be a list of "
                                 "host:port/chroot connect strings")
        merged["live_zookeepers"] = live
        merged["completeness"] = _completeness_source(path, merged["name"], merged.get("completeness"), live)
        merged["start_date"] = _parse_time(merged.get("start_date", "2024-01-01"), "start_date")
        for key in ("lateness_minutes", "retries", "retry_delay_s", "max_retry_delay_s", "max_per_split",
                    "check_poke_s"):
            if key in merged and (not isinstance(merged[key], int) or merged[key] < 0):
                raise DagConfigError(f"{path}: group {merged['name']!r}: {key} must be an integer >= 0")
        merged["state_dir"] = str(Path(merged["state_dir"]).expanduser())
        groups.append(GroupConfig(**merged))
    return groups


# ------------------------------------------------------------------------------------------ client settings
# keys of a `kafka` connection's extra that are not client security settings for ferry (it finds the brokers
# in ZooKeeper; the provider's operators use these)
NOT_CLIENT_KEYS = frozenset({"bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit"})


def client_file(conn_id: str | None, state_dir: str, *, write: bool = True) -> str | None:
    """The path of the client properties file of Airflow connection ``conn_id`` (its extra: librdkafka
    properties), under the state directory; ``write``: (re)written now from the connection, 0600, replaced
    atomically (a changed password takes effect on the next task). None when no connection is configured."""
    if not conn_id:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", conn_id)
    path = Path(state_dir) / "client-config" / f"airflow-{safe}.properties"
    if write:
        from airflow.sdk import BaseHook

        extra = BaseHook.get_connection(conn_id).extra_dejson
        if not isinstance(extra, dict):
            raise DagConfigError(f"Airflow connection {conn_id!r}: extra must be a JSON object of client properties")
        props = {str(k): str(v) for k, v in extra.items() if k not in NOT_CLIENT_KEYS}
        config = ClientConfig(props, f"Airflow connection {conn_id}")  # checked: one line, never the secret
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        config.write_private(tmp)
        tmp.replace(path)
    return str(path)


# ------------------------------------------------------------------------------------------ hour logic
def hour_floor(t: dt.datetime) -> dt.datetime:
    return t.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)


def label(t: dt.datetime) -> tuple[str, str]:
    t = t.astimezone(dt.UTC)
    return t.strftime("%Y-%m-%d"), t.strftime("%H")


def check_deadline(hour: dt.datetime, lateness_minutes: int) -> dt.datetime:
    """When ``check_complete`` stops waiting for ``hour`` and fails: its end plus the lateness."""
    return hour_floor(hour) + HOUR + dt.timedelta(minutes=lateness_minutes)


def books_file(cfg: GroupConfig, run_id: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", run_id)
    return Path(cfg.state_dir) / "dag_books" / cfg.dag_id / f"{safe}.json"


def asset_for(cfg: GroupConfig, topic: str):
    from airflow.sdk import Asset

    table = table_for_topic(topic)
    return Asset(name=f"ferry.{cfg.database}.{table}", uri=f"ferry://warehouse/{cfg.database}/{table}",
                 group="ferry-warehouse")


# ------------------------------------------------------------------------------------------ task bodies
def plan_task(cfg: GroupConfig, context: dict) -> dict:
    """End offsets for this run, and the hours to judge (pushed to XCom)."""
    interval_start, interval_end = context["data_interval_start"], context["data_interval_end"]
    if interval_end <= interval_start:  # a zero-length (trigger-style) interval: judge the previous hour
        interval_start = hour_floor(interval_end) - HOUR
        interval_end = interval_start + HOUR
    plan = steps.plan(cfg.load_config())
    log.info("ferry: %d messages to load\n%s", plan.total, plan.describe())
    now = dt.datetime.now(dt.UTC)
    judge = hour_floor(interval_start)
    hours = [label(judge)]
    return {
        "until_json": offsets_json({(r.topic, r.partition): r.end for r in plan.ranges}),
        "total": plan.total,
        "hours": [list(h) for h in hours],
        "hours_arg": ",".join(f"{d}T{h}" for d, h in hours),
        "check_hour": list(label(judge)),
        "check_deadline": check_deadline(judge, cfg.lateness_minutes).timestamp(),
        "interval_end": interval_end.timestamp(),
        "since": context["dag_run"].start_date.timestamp() if context.get("dag_run") and
        context["dag_run"].start_date else now.timestamp(),
        "books_file": str(books_file(cfg, context["run_id"])),
    }


def load_task(cfg: GroupConfig, plan: dict) -> dict:
    until = parse_offsets_json(plan["until_json"], "until") if plan.get("until_json") else None
    _, result = steps.load(cfg.load_config(until=until))
    return {"run_id": result.run_id, "committed": result.committed, "rows": result.rows,
            "hours": [list(h) for h in result.hours()]}


def reconcile_task(cfg: GroupConfig, plan: dict) -> list[dict]:
    _, statuses = steps.reconcile(cfg.load_config(), [tuple(h) for h in plan["hours"]], since=plan["since"])
    out = [s.to_dict() for s in statuses]
    path = Path(plan["books_file"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hours": out}, indent=1))
    return out


def read_books(plan: dict) -> list[dict]:
    path = Path(plan["books_file"])
    if not path.exists():
        raise FileNotFoundError(f"{path}: the reconcile task wrote no books for this run")
    return json.loads(path.read_text())["hours"]


def publish_task(cfg: GroupConfig, topic: str, plan: dict, outlet_events) -> list[str]:
    """Complete hours of one table not yet published (or re-completed with more rows after late data),
    among the hours that ended by this run's interval end: recorded in the ledger, announced as one
    Asset event whose extra lists them."""
    from airflow.sdk.exceptions import AirflowSkipException

    table = f"{cfg.database}.{table_for_topic(topic)}"
    ledger = Ledger(cfg.state_dir)
    published = ledger.published_hours(table)
    limit = plan["interval_end"]
    new: dict[str, int] = {}
    for b in read_books(plan):
        hour = f"{b['dt']}T{b['hr']}"
        ended = dt.datetime.strptime(hour, "%Y-%m-%dT%H").replace(tzinfo=dt.UTC) + HOUR
        if b["topic"] == topic and b["complete"] and ended.timestamp() <= limit and published.get(hour) != b["loaded"]:
            new[hour] = b["loaded"]
    if not new:
        raise AirflowSkipException(f"{table}: no newly complete hour to publish")
    with ledger.lock():
        revisions = ledger.mark_published(table, new)
    hours = sorted(new)
    revised = sorted(h for h, n in revisions.items() if n > 0)
    outlet_events[asset_for(cfg, topic)].extra = {"table": table, "hours": hours, "rows": new,
                                                  "revised": revised, "revision": revisions,
                                                  "completeness": cfg.completeness}
    log.info("ferry: published %s hours %s%s", table, ", ".join(hours),
             f" (revised: {', '.join(revised)})" if revised else "")
    return hours


def judge_books(cfg: GroupConfig, judge: tuple[str, str], books: list[dict], *, final: bool) -> str | None:
    """``"<hour> ok"`` when every topic's judged hour is complete (or empty); None to keep waiting; after the
    deadline (``final``) an incomplete or unknown hour raises AirflowFailException naming what is missing."""
    from airflow.sdk.exceptions import AirflowFailException

    books = [b for b in books if (b["dt"], b["hr"]) == tuple(judge)]
    bad = [b for b in books if b["status"] not in ("complete", "empty")]
    for b in books:
        log.info("ferry: %s %s %s:00 %s (produced %d, loaded %d, missing %d, duplicates %d)", b["topic"], b["dt"],
                 b["hr"], b["status"], b["produced"], b["loaded"], b["missing"], b["duplicates"])
    if not bad:
        return f"{judge[0]}T{judge[1]} ok"
    if not final:
        return None
    parts = []
    for b in bad:
        text = (f"{b['topic']}: produced {b['produced']}, mirrored {b['mirrored']}, loaded {b['loaded']}, "
                f"missing {b['missing']}, duplicates {b['duplicates']}")
        if b.get("unreachable"):
            text += f" (unknown: live producer counts unreachable from {', '.join(b['unreachable'])})"
        parts.append(text)
    msg = (f"ferry: hour {judge[0]} {judge[1]}:00 still incomplete {cfg.lateness_minutes} min after its end "
           f"— {'; '.join(parts)}")
    log.error(msg)
    raise AirflowFailException(msg)


def fresh_books(cfg: GroupConfig, hours: list[tuple[str, str]]) -> list[dict]:
    """The books of ``hours`` from `_audit` itself (offline: every tier; live: the producers' counts), with
    the same decision as the reconcile step (ferry.audit.completeness), without Spark."""
    live = read_live_counts(cfg.live_zookeepers, client_config=cfg.live_client())
    try:
        events = read_audit_events(cfg.zookeeper, timeout_s=15.0, client_config=cfg.offline_client()).events
    except Exception as e:  # the offline cluster is the one we load from: unreachable means unknown too
        log.warning("ferry: offline `_audit` unreadable: %s", e)
        events, live.unreachable = [], [*live.unreachable, cfg.zookeeper]
    return [s.to_dict() for s in books(events + live.events, cfg.topics, hours, unreachable=live.unreachable,
                                       offline_only=cfg.completeness == "offline-only")]


def check_poke(cfg: GroupConfig, plan: dict) -> tuple[bool, str | None]:
    """One look of the check_complete sensor: (done, result)."""
    judge = tuple(plan["check_hour"])
    final = dt.datetime.now(dt.UTC).timestamp() >= plan["check_deadline"]
    result = judge_books(cfg, judge, fresh_books(cfg, [judge]), final=final)
    return result is not None, result


# ------------------------------------------------------------------------------------------ the DAG
def build_dag(cfg: GroupConfig):
    from airflow.sdk import DAG, task
    from airflow.timetables.interval import CronDataIntervalTimetable

    schedule = {"@hourly": "0 * * * *", "@daily": "0 0 * * *"}.get(cfg.schedule, cfg.schedule)
    default_args = {
        "owner": "ferry",
        "retries": cfg.retries,
        "retry_delay": dt.timedelta(seconds=cfg.retry_delay_s),
        "retry_exponential_backoff": True,
        "max_retry_delay": dt.timedelta(seconds=cfg.max_retry_delay_s),
        "depends_on_past": False,
    }
    with DAG(
        dag_id=cfg.dag_id,
        description=f"hourly warehouse load of {', '.join(cfg.topics)}",
        schedule=CronDataIntervalTimetable(schedule, timezone="UTC"),
        start_date=cfg.start_date,
        catchup=cfg.catchup,
        # loads of one ledger run one at a time (its lock); runs whose check_complete still waits for their
        # hour (up to lateness_minutes, in reschedule mode) do not hold back the next hours
        max_active_runs=2 + math.ceil(cfg.lateness_minutes / 60),
        default_args=default_args,
        tags=["ferry", "warehouse", *cfg.tags],
        doc_md=__doc__,
    ) as dag:

        @task(task_id="plan")
        def plan(**context):
            return plan_task(cfg, context)

        planned = plan()
        spark_pool = {"pool": cfg.pool} if cfg.pool else {}
        if cfg.spark_conn_id:
            from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

            common = _submit_args(cfg)
            loaded = SparkSubmitOperator(
                task_id="load", **spark_pool, conn_id=cfg.spark_conn_id, application=str(_load_job_path()),
                name=f"{cfg.dag_id}-load", conf=_submit_conf(cfg), env_vars=_submit_env(cfg),
                application_args=[*common, "--step", "load", "--until-offsets",
                                  "{{ ti.xcom_pull(task_ids='plan')['until_json'] }}"])
            reconciled = SparkSubmitOperator(
                task_id="reconcile", **spark_pool, conn_id=cfg.spark_conn_id, application=str(_load_job_path()),
                name=f"{cfg.dag_id}-reconcile", conf=_submit_conf(cfg), env_vars=_submit_env(cfg),
                application_args=[*common, "--step", "reconcile",
                                  "--hours", "{{ ti.xcom_pull(task_ids='plan')['hours_arg'] }}",
                                  "--since", "{{ ti.xcom_pull(task_ids='plan')['since'] }}",
                                  "--json", "{{ ti.xcom_pull(task_ids='plan')['books_file'] }}"])
            planned >> loaded >> reconciled
        else:
            @task(task_id="load", **spark_pool)
            def load(plan_out: dict):
                return load_task(cfg, plan_out)

            @task(task_id="reconcile", **spark_pool)
            def reconcile(plan_out: dict, _loaded: dict):
                return reconcile_task(cfg, plan_out)

            reconciled = reconcile(planned, load(planned))

        for topic in cfg.topics:
            @task(task_id=f"publish_{table_for_topic(topic)}", outlets=[asset_for(cfg, topic)], retries=1)
            def publish(plan_out: dict, topic: str = topic, **context):
                return publish_task(cfg, topic, plan_out, context["outlet_events"])

            reconciled >> publish(planned)

        @task.sensor(task_id="check_complete", retries=0, mode="reschedule", poke_interval=cfg.check_poke_s,
                     timeout=(cfg.lateness_minutes + 24 * 60) * 60)
        def check_complete(plan_out: dict):
            from airflow.sdk import PokeReturnValue

            done, result = check_poke(cfg, plan_out)
            return PokeReturnValue(is_done=done, xcom_value=result)

        reconciled >> check_complete(planned)
    return dag


def _load_job_path() -> Path:
    """The spark-submit application: the load's command line (same flags as `ferry load`)."""
    return Path(ferry.loaders.cli.__file__).resolve()


def _submit_args(cfg: GroupConfig) -> list[str]:
    args = ["--zookeeper", cfg.zookeeper, "--topics", ",".join(cfg.topics) if len(cfg.topics) > 1 else
            cfg.topics[0] + ",", "--state-dir", cfg.state_dir, "--database", cfg.database,
            "--start", cfg.start, "--max-per-split", str(cfg.max_per_split)]
    if cfg.warehouse:
        args += ["--warehouse", cfg.warehouse]
    for live in cfg.live_zookeepers:
        args += ["--live-zookeeper", live]
    # the client files' paths (never their content): written by the plan task from the Airflow connections
    for flag, conn_id in (("--command-config", cfg.kafka_conn_id), ("--live-command-config", cfg.live_kafka_conn_id)):
        if conn_id:
            args += [flag, str(client_file(conn_id, cfg.state_dir, write=False))]
    return args


def _submit_env(cfg: GroupConfig) -> dict[str, str]:
    """The driver's environment; the metastore travels here, not in the arguments (it may hold a password)."""
    project = str(_load_job_path().parent.parent)
    env = {"PYSPARK_PYTHON": cfg.python, "PYSPARK_DRIVER_PYTHON": cfg.python,
           "PYTHONPATH": project + os.pathsep + os.environ.get("PYTHONPATH", "")}
    metastore = cfg.metastore or os.environ.get("FERRY_METASTORE")
    if metastore:
        env["FERRY_METASTORE"] = metastore
    return env


def _submit_conf(cfg: GroupConfig) -> dict[str, str]:
    """spark-submit's settings: the group's, plus what the driver JVM needs before it starts (the PostgreSQL
    JDBC driver on its class path when the metastore is PostgreSQL)."""
    conf = dict(cfg.spark_conf)
    metastore = cfg.metastore or os.environ.get("FERRY_METASTORE")
    if metastore:
        static = parse(metastore, cfg.state_dir).spark_conf(cfg.state_dir)
        for key in ("spark.driver.extraClassPath",):
            if key in static:
                conf.setdefault(key, static[key])
    return conf


def build_all(path: str | os.PathLike | None = None) -> dict[str, Any]:
    return {g.dag_id: build_dag(g) for g in load_config(path)}
