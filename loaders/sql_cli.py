"""``ferry sql``: Spark SQL on the warehouse (spark-sql), and ``ferry sql serve``: Spark's Thrift JDBC/ODBC server.

Both are the pyspark distribution's own programs (``bin/spark-sql``; ``HiveThriftServer2`` from the
``spark-hive-thriftserver`` jar the wheel ships) started with the settings a load uses: the same metastore
(sql_metastore.py: PostgreSQL, a metastore service or the embedded Derby), warehouse directory, UTC time zone.
The metastore is checked first, so a stopped, wrong or locked one gives one line and exit 1, not a JVM
stack trace; Java's own stack-trace lines are kept off the terminal (FERRY_DEBUG=1 shows them).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ferry.loaders.session import python_for_workers
from ferry.loaders.sql_metastore import Metastore, MetastoreError, explain, parse, spark_home, spark_jars_dir
from ferry.loaders.sql_thrift_security import (
    PROVIDER_CLASS,
    PROVIDER_SETTING,
    SOCKET_ENV,
    CredentialVerifier,
    ThriftSecurity,
    ThriftSecurityError,
    compile_provider,
    write_keystore,
)
from ferry.loaders.state_dir import state_dir
from ferry.zk import cli_args as cli
from ferry.zk.cli_args import UsageError, parse_listen
from ferry.zk.scram_credentials import ScramAuthenticator

DESCRIPTION = """\
Query the warehouse's hourly tables with Spark SQL, in a shell (no -e/-f), one statement (-e) or a file (-f);
or serve them to JDBC/ODBC clients (beeline, DBeaver, PyHive) with `ferry sql serve --listen HOST:PORT`.
The metastore is the one the loads use: --metastore or $FERRY_METASTORE (PostgreSQL: loads and any number of
readers at once), else the embedded Derby of --state-dir (one process at a time). See docs/analysts.md.

examples:
  ferry sql --metastore postgresql://ferry@db1/metastore -e "SELECT hr, count(*) FROM page_view GROUP BY hr"
  ferry sql --state-dir /var/lib/ferry/load -f report.sql
  ferry sql serve --listen 127.0.0.1:10000 --metastore postgresql://ferry@db1/metastore
  beeline -u jdbc:hive2://127.0.0.1:10000/ferry -e "SELECT * FROM ferry_completeness WHERE NOT complete"
  ferry sql serve --listen 0.0.0.0:10000 --ssl-certfile sql.pem --ssl-keyfile sql.key --auth scram \
      --zookeeper zk1:2181/ferry/offline --metastore postgresql://ferry@db1/metastore   (docs/security.md)
"""
THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
_TRACE_PREFIXES = ("\tat ", "Caused by:", "\t... ", "\tSuppressed:")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("shell", "serve"), default="shell",
                   help="shell (default): spark-sql; serve: the Thrift JDBC/ODBC server")
    what = p.add_mutually_exclusive_group()
    what.add_argument("-e", dest="query", metavar="QUERY", help="run these statements and exit")
    what.add_argument("-f", dest="file", metavar="FILE", help="run the statements of FILE and exit")
    p.add_argument("--listen", default="127.0.0.1:10000", metavar="HOST:PORT",
                   help="serve: where the Thrift server listens (default 127.0.0.1:10000)")
    cli.add_state_dir_argument(p, "the loads' state directory: its embedded Derby metastore and warehouse are the "
                               "defaults")
    p.add_argument("--metastore", default=None, metavar="URL",
                   help="postgresql://USER[:PASSWORD]@HOST[:PORT]/DB, thrift://HOST:PORT or derby:DIR "
                        "(default $FERRY_METASTORE, else STATE_DIR's embedded Derby)")
    p.add_argument("--warehouse", default=None, metavar="DIR|URI", help="warehouse root (default STATE_DIR/warehouse)")
    p.add_argument("--transport", choices=("binary", "http"), default="binary",
                   help="serve: HiveServer2's transport: binary (default) or http (HTTP/HTTPS at /cliservice)")
    sec = p.add_argument_group("TLS and authentication of serve (docs/security.md)")
    sec.add_argument("--ssl-certfile", metavar="PEM", help="serve: TLS with this certificate (chain)")
    sec.add_argument("--ssl-keyfile", metavar="PEM", help="serve: its private key (default: in --ssl-certfile)")
    sec.add_argument("--auth", choices=("none", "scram"), default="none",
                     help="serve: scram: JDBC logins checked against the cluster's SCRAM users (default none)")
    cli.add_zookeeper_argument(sec, "serve: the cluster whose SCRAM users log in (--auth scram)")
    sec.add_argument("--insecure", action="store_true",
                     help="serve: allow a non-loopback --listen without TLS and authentication")
    p.add_argument("--database", default="ferry", metavar="NAME", help="current database (default ferry)")
    p.add_argument("--master", default="local[2]", metavar="MASTER", help="Spark master (default local[2])")
    cli.add_conf_argument(p)


def settings(args: argparse.Namespace, state: Path, metastore: Metastore, scratch: Path) -> dict[str, str]:
    """``state``: the state directory run() resolved (its Derby and warehouse are the defaults)."""
    conf = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": args.warehouse or str(state / "warehouse"),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "8",
        "spark.local.dir": str(scratch),
        "spark.hadoop.hive.stats.autogather": "false",
        **metastore.spark_conf(state),
    }
    log4j = scratch / "log4j2.properties"
    level = os.environ.get("FERRY_SPARK_LOG_LEVEL", "ERROR")
    log4j.write_text(f"rootLogger.level = {level}\nrootLogger.appenderRef.stderr.ref = console\n"
                     "appender.console.type = Console\nappender.console.name = console\n"
                     "appender.console.target = SYSTEM_ERR\nappender.console.layout.type = PatternLayout\n"
                     "appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex\n")
    java = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{java} -Dlog4j.configurationFile=file:{log4j}".strip()
    conf.update(cli.parse_key_values(args.conf, "--conf", "spark.driver.memory=2g"))
    return conf


def write_properties(conf: dict[str, str], path: Path) -> Path:
    """Spark's --properties-file (mode 600: it may hold the metastore's password, kept off the process list)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        for k, v in conf.items():
            f.write(f"{k} {v}\n")
    return path


def command(args: argparse.Namespace, properties: Path) -> list[str]:
    bin_dir = spark_home() / "bin"
    if args.action == "serve":
        host, port = parse_listen(args.listen, "--listen")
        port_setting = "hive.server2.thrift.http.port" if args.transport == "http" else "hive.server2.thrift.port"
        return [str(bin_dir / "spark-submit"), "--master", args.master, "--properties-file", str(properties),
                "--name", "ferry-sql-thrift", "--class", THRIFT_SERVER, "spark-internal",
                "--hiveconf", f"hive.server2.transport.mode={args.transport}",
                "--hiveconf", f"hive.server2.thrift.bind.host={host}", "--hiveconf", f"{port_setting}={port}"]
    cmd = [str(bin_dir / "spark-sql"), "--master", args.master, "--properties-file", str(properties),
           "--database", args.database]
    if args.query is not None:
        cmd += ["-e", args.query]
    elif args.file is not None:
        cmd += ["-f", args.file]
    return cmd


def run(args: argparse.Namespace) -> int:
    """Failures before Spark starts are raised (ferry/cli_runner.py: one line; usage 2, runtime 1)."""
    if args.action == "serve" and (args.query is not None or args.file is not None):
        raise UsageError("serve takes no -e/-f")
    security = ThriftSecurity(certfile=args.ssl_certfile, keyfile=args.ssl_keyfile, auth=args.auth,
                              zookeeper=args.zookeeper, insecure=args.insecure)
    if args.action == "serve":
        host, _ = parse_listen(args.listen, "--listen")  # ValueError: exit 2 before anything starts
        try:
            security.check(host)
        except ThriftSecurityError as e:
            raise UsageError(str(e)) from None
    elif security.tls or security.auth != "none" or args.insecure or args.transport != "binary":
        raise UsageError("--transport, --ssl-certfile, --ssl-keyfile, --auth and --insecure are for "
                         "`ferry sql serve`")
    if args.file is not None and not Path(args.file).is_file():
        raise FileNotFoundError(errno.ENOENT, "-f: no such file", args.file)
    state = state_dir(args.state_dir)
    if not state.is_dir() and not (args.metastore or os.environ.get("FERRY_METASTORE")):
        raise MetastoreError(f"no warehouse at {state} (no load has run with this state directory): give the loads' "
                             "--state-dir, or --metastore")
    metastore = parse(args.metastore, str(state))
    if metastore.kind == "derby" and not Path(metastore.location).is_dir():  # spark-sql would make an empty one
        raise MetastoreError(f"no warehouse in {state}: its metastore {metastore.location} does not exist yet; run a "
                             "load first (`ferry load --state-dir`), or give the loads' --state-dir or --metastore")
    metastore.check()
    python_for_workers()
    with tempfile.TemporaryDirectory(prefix="ferry-sql-") as tmp:
        scratch = Path(tmp)
        conf = settings(args, state, metastore, scratch)
        env = dict(os.environ, SPARK_HOME=str(spark_home()))
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        verifier = _secure(args, security, conf, env, scratch) if args.action == "serve" else None
        cmd = command(args, write_properties(conf, scratch / "spark.properties"))
        try:
            return _run_java(cmd, env, args, cwd=scratch, tls=security.tls)
        finally:
            if verifier is not None:
                verifier.stop()


def _secure(args: argparse.Namespace, security: ThriftSecurity, conf: dict[str, str], env: dict[str, str],
            scratch: Path) -> CredentialVerifier | None:
    """The keystore, the compiled provider and the credential verifier of a secured server, all inside the
    private ``scratch`` directory; their settings go into ``conf`` (the mode-600 properties file) and ``env``."""
    keystore = password = None
    if security.tls:
        keystore = scratch / "keystore.p12"
        try:
            password = write_keystore(security.certfile, security.keyfile, keystore)
        except ThriftSecurityError as e:
            raise UsageError(str(e)) from None
    conf.update(security.hive_settings(keystore, password))
    if security.auth != "scram":
        return None
    classes = compile_provider(scratch, spark_jars_dir())
    extra = conf.get("spark.driver.extraClassPath")
    conf["spark.driver.extraClassPath"] = f"{extra}:{classes}" if extra else str(classes)
    # Hive builds the provider from a fresh HiveConf, which sees system properties, not the server's conf
    java = conf.get("spark.driver.extraJavaOptions", "")
    conf["spark.driver.extraJavaOptions"] = f"{java} -D{PROVIDER_SETTING}={PROVIDER_CLASS}".strip()
    env[SOCKET_ENV] = str(scratch / "auth.sock")
    return CredentialVerifier(scratch / "auth.sock", ScramAuthenticator(security.zookeeper)).start()


def _run_java(cmd: list[str], env: dict[str, str], args: argparse.Namespace, cwd: Path, tls: bool = False) -> int:
    """Run spark-sql / the Thrift server with its stderr filtered; a metastore failure becomes one line."""
    debug = bool(os.environ.get("FERRY_DEBUG"))
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=args.action == "serve")
    seen: list[str] = []

    def pump() -> None:
        for line in proc.stderr:
            if len(seen) < 5000:
                seen.append(line)
            if debug or not line.startswith(_TRACE_PREFIXES):
                sys.stderr.write(line)
                sys.stderr.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    if args.action == "serve":
        _announce_when_listening(proc, args.listen, tls, args.transport)

    def stop(signum, _frame) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM,)} if args.action == "serve" else {}
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM if args.action == "serve" else signal.SIGINT)
        try:
            rc = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        rc = rc or 130
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    reader.join(5)
    if rc != 0 and (why := explain("".join(seen))):
        print(f"ferry sql: error: {why}", file=sys.stderr)
    return 0 if rc in (0, -signal.SIGTERM, 143) and args.action == "serve" else (1 if rc else 0)


def _announce_when_listening(proc: subprocess.Popen, listen: str, tls: bool, transport: str,
                             timeout_s: float = 300.0) -> None:
    """Print the JDBC URL once the server listens (bounded wait; the server's death ends it)."""
    host, port = parse_listen(listen, "--listen")
    mode = ";transportMode=http;httpPath=cliservice" if transport == "http" else ""
    probe = "127.0.0.1" if host in ("0.0.0.0", "") else host
    deadline = time.monotonic() + timeout_s

    def wait() -> None:
        while time.monotonic() < deadline and proc.poll() is None:
            if _listening(probe, port):
                print(f"ferry sql serve: JDBC/ODBC at jdbc:hive2://{probe}:{port}/{mode}{';ssl=true' if tls else ''} "
                      "(Ctrl-C stops)", flush=True)
                return
            time.sleep(0.5)

    threading.Thread(target=wait, daemon=True).start()


def _listening(host: str, port: int) -> bool:
    """Whether a socket listens on ``port``: read from /proc/net/tcp* where there is one, so that no probe
    connection makes the server log a failed handshake or login; else by connecting."""
    tables = [Path("/proc/net/tcp"), Path("/proc/net/tcp6")]
    if tables[0].exists():
        suffix = f":{port:04X}"
        for table in tables:
            try:
                rows = table.read_text().splitlines()[1:]
            except OSError:
                continue
            if any(len(f := row.split()) > 3 and f[1].endswith(suffix) and f[3] == "0A" for row in rows):
                return True
        return False
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
