"""Where the Hive metastore lives, said once for ``ferry load``, ``ferry sql``, the Thrift server and the DAGs.

One setting (``--metastore`` or ``$FERRY_METASTORE``) names it:

- ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB`` (or ``jdbc:postgresql://HOST:PORT/DB?user=U&password=P``): the
  metastore tables in PostgreSQL, reached over JDBC (Debian's ``libpostgresql-jdbc-java``) by every Spark
  process directly. Any number of loads and analysts' sessions use it at once. The schema is created once,
  before first use, by DataNucleus' SchemaTool from Hive's own ``package.jdo`` under a PostgreSQL advisory lock
  (Hive's lazy schema creation deadlocks on PostgreSQL: DDL waits for the same JVM's open transaction).
- ``thrift://HOST:PORT[,thrift://...]``: a running Hive metastore service.
- ``derby:DIR`` or nothing: the embedded Derby database ``STATE_DIR/metastore_db``. Derby admits ONE process:
  while a load holds it, readers get one clear line (``MetastoreError``), not a stack trace.

Without a setting, a state directory may name its own metastore in ``STATE_DIR/metastore.url`` (one spec):
``ferry demo`` writes its local PostgreSQL there, so ``ferry sql --state-dir`` of the demo finds it.

Every failure to reach the metastore is a :class:`MetastoreError` whose text is one line for the user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import socket
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

ENV_METASTORE = "FERRY_METASTORE"
ENV_JDBC_JAR = "FERRY_POSTGRESQL_JDBC_JAR"
DEFAULT_JDBC_JAR = "/usr/share/java/postgresql.jar"  # Debian's libpostgresql-jdbc-java
_SCHEMA_TABLES = ("DBS", "TBLS", "PARTITIONS", "SDS", "TBL_PRIVS")
_ADVISORY_KEY = 0x6665727279  # "ferry": serializes schema creation between processes
STATE_FILE = "metastore.url"  # in a state directory: the metastore its loads use when none is given


class MetastoreError(RuntimeError):
    """The metastore cannot be used; the message is one line meant for the user."""


@dataclass(frozen=True)
class Metastore:
    kind: str  # "derby" | "postgresql" | "thrift"
    location: str  # derby: database directory; postgresql: jdbc URL without credentials; thrift: the URIs
    user: str = ""
    password: str = ""
    origin: str = ""  # where the spec came from when it was not given (a state directory's metastore.url)

    # ------------------------------------------------------------------ naming
    def describe(self) -> str:
        """The metastore as a person reads it (never the password)."""
        if self.kind == "postgresql":
            named = f", named by {self.origin}" if self.origin else ""
            return f"PostgreSQL {self.location.removeprefix('jdbc:postgresql://')} (user {self.user or '-'}{named})"
        if self.kind == "thrift":
            return f"metastore service {self.location}"
        return f"embedded Derby {self.location}"

    @property
    def host_port(self) -> tuple[str, int]:
        rest = self.location.removeprefix("jdbc:postgresql://").split("/", 1)[0]
        host, _, port = rest.rpartition(":")
        return (host, int(port)) if host else (rest, 5432)

    @property
    def database(self) -> str:
        return self.location.removeprefix("jdbc:postgresql://").split("/", 1)[1].split("?", 1)[0]

    # ------------------------------------------------------------------ Spark settings
    def spark_conf(self, state_dir: str | os.PathLike | None = None) -> dict[str, str]:
        """The settings a Spark application (session, spark-sql, Thrift server) needs for this metastore."""
        if self.kind == "thrift":
            return {"spark.hadoop.hive.metastore.uris": self.location}
        if self.kind == "postgresql":
            return {
                "spark.hadoop.javax.jdo.option.ConnectionURL": self.location,
                "spark.hadoop.javax.jdo.option.ConnectionDriverName": "org.postgresql.Driver",
                "spark.hadoop.javax.jdo.option.ConnectionUserName": self.user,
                "spark.hadoop.javax.jdo.option.ConnectionPassword": self.password,
                "spark.hadoop.datanucleus.schema.autoCreateAll": "false",  # made once by ensure_schema
                "spark.hadoop.hive.metastore.schema.verification": "false",
                "spark.driver.extraClassPath": jdbc_jar(),
            }
        home = Path(self.location).parent
        return {
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.location};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={home}",
        }

    # ------------------------------------------------------------------ checks
    def check(self, *, create_schema: bool = True, timeout_s: float = 5.0) -> None:
        """Raise MetastoreError (one line) unless the metastore can be used now; PostgreSQL: create the Hive
        schema first if it is missing (``create_schema``)."""
        if self.kind == "thrift":
            for uri in self.location.split(","):
                parts = urlsplit(uri.strip())
                _reach(parts.hostname or "", parts.port or 9083, self.describe(), timeout_s)
        elif self.kind == "postgresql":
            with self._connect(timeout_s) as conn:
                if not _has_schema(conn):
                    if not create_schema:
                        raise MetastoreError(f"{self.describe()} has no Hive metastore schema yet (a load creates it)")
                    self._create_schema(conn)
        else:
            derby_in_use(self.location)

    @contextlib.contextmanager
    def _connect(self, timeout_s: float) -> Iterator:
        import pg8000.dbapi  # only a PostgreSQL metastore needs the driver

        host, port = self.host_port
        _reach(host, port, self.describe(), timeout_s)
        try:
            conn = pg8000.dbapi.connect(user=self.user or os.environ.get("USER", "postgres"),
                                        password=self.password or None, host=host, port=port,
                                        database=self.database, timeout=timeout_s)
        except pg8000.dbapi.DatabaseError as e:
            raise MetastoreError(f"{self.describe()}: {_pg_message(e)}") from None
        except (OSError, pg8000.dbapi.InterfaceError) as e:
            raise MetastoreError(f"{self.describe()}: {e}") from None
        try:
            yield conn
        finally:
            with contextlib.suppress(Exception):
                conn.close()

    def _create_schema(self, conn) -> None:
        """Hive's tables, all at once (DataNucleus SchemaTool over Hive's package.jdo), while holding an advisory
        lock so that two first users do not both create them."""
        cur = conn.cursor()
        cur.execute("SELECT pg_advisory_lock(%s)", (_ADVISORY_KEY,))
        try:
            if _has_schema(conn):
                return
            run_schema_tool(self)
            if not _has_schema(conn):
                raise MetastoreError(f"{self.describe()}: creating the Hive metastore schema failed")
        finally:
            cur.execute("SELECT pg_advisory_unlock(%s)", (_ADVISORY_KEY,))
            conn.commit()


def jdbc_jar() -> str:
    return os.environ.get(ENV_JDBC_JAR) or DEFAULT_JDBC_JAR


def _reach(host: str, port: int, what: str, timeout_s: float) -> None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise MetastoreError(f"{what} is not reachable at {host}:{port} ({reason}): is it running?") from None


def _pg_message(e: Exception) -> str:
    arg = e.args[0] if e.args else e
    if isinstance(arg, dict):
        return str(arg.get("M") or arg)
    return str(arg)


def _has_schema(conn) -> bool:
    cur = conn.cursor()
    names = ", ".join(f"'{t}'" for t in _SCHEMA_TABLES)
    cur.execute(f"SELECT count(*) FROM information_schema.tables WHERE table_name IN ({names})")
    (n,) = cur.fetchone()
    conn.commit()
    return n == len(_SCHEMA_TABLES)


def spark_home() -> Path:
    """The pyspark distribution (its bin/ and jars/). Under spark-submit (the DAG's SparkSubmitOperator) the
    driver imports pyspark from ``python/lib/pyspark.zip``, where no jars sit beside it: $SPARK_HOME, which
    spark-submit sets, is the distribution then."""
    env = os.environ.get("SPARK_HOME")
    if env and (Path(env) / "jars").is_dir():
        return Path(env)
    import pyspark  # ~0.5 s: only where Spark's own programs or jars are needed, not for parsing a spec

    return Path(pyspark.__file__).resolve().parent


def spark_jars_dir() -> Path:
    return spark_home() / "jars"


def run_schema_tool(ms: Metastore, timeout_s: float = 300.0) -> None:
    """``org.datanucleus.store.schema.SchemaTool -create`` with the identifier settings Hive's ObjectStore uses,
    so the tables are exactly those Hive 2.3 then reads and writes."""
    jars = spark_jars_dir()
    metastore_jar = next(jars.glob("hive-metastore-*.jar"), None)
    if metastore_jar is None or not Path(jdbc_jar()).exists():
        raise MetastoreError(f"cannot create the metastore schema: need {jars}/hive-metastore-*.jar and the "
                             f"PostgreSQL JDBC driver {jdbc_jar()} (Debian: libpostgresql-jdbc-java)")
    with tempfile.TemporaryDirectory(prefix="ferry-schema-") as tmp:
        with zipfile.ZipFile(metastore_jar) as z:
            z.extract("package.jdo", tmp)
        props = Path(tmp) / "datanucleus.properties"
        fd = os.open(props, os.O_WRONLY | os.O_CREAT, 0o600)  # holds the password
        with os.fdopen(fd, "w") as f:
            f.write("javax.jdo.option.ConnectionDriverName=org.postgresql.Driver\n"
                    f"javax.jdo.option.ConnectionURL={ms.location}\n"
                    f"javax.jdo.option.ConnectionUserName={ms.user}\n"
                    f"javax.jdo.option.ConnectionPassword={ms.password}\n"
                    "datanucleus.identifierFactory=datanucleus1\n"
                    "datanucleus.rdbms.useLegacyNativeValueStrategy=true\n"
                    "datanucleus.storeManagerType=rdbms\n"
                    "datanucleus.schema.autoCreateAll=true\n")
        cmd = ["java", "-XX:TieredStopAtLevel=1", "-cp", f"{jars}/*:{jdbc_jar()}",
               "org.datanucleus.store.schema.SchemaTool", "-create", "-api", "JDO", "-props", str(props),
               str(Path(tmp) / "package.jdo")]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise MetastoreError(f"{ms.describe()}: creating the Hive schema failed: {e}") from None
    if proc.returncode != 0 or "completed successfully" not in proc.stdout + proc.stderr:
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip() and not ln.startswith("\tat ")]
        raise MetastoreError(f"{ms.describe()}: creating the Hive schema failed: {(lines or ['?'])[-1][:300]}")


def derby_in_use(db_dir: str | os.PathLike, wait_s: float = 10.0) -> None:
    """MetastoreError when another process has the embedded Derby database booted. Derby holds a lock on
    ``dbex.lck`` (Java's FileChannel lock = a POSIX record lock) for as long as it has the database open.

    Waits up to ``wait_s`` for the lock first: the JVM of a load that has just ended (its Python process
    gone) lets go of it a moment later, and a load or `ferry sql` started right after must not fail on that.
    """
    lock = Path(db_dir) / "dbex.lck"
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return  # never booted, or not booted now
    deadline = time.monotonic() + wait_s
    try:
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, 0)
                return
            except OSError:
                if time.monotonic() >= deadline:
                    raise MetastoreError(
                        f"the embedded metastore {db_dir} is in use by another process (a load, `ferry demo` or "
                        "another session): Derby admits one process at a time. Use a shared metastore, e.g. "
                        "--metastore postgresql://USER@HOST/DB (docs/analysts.md)") from None
                time.sleep(0.1)
    finally:
        os.close(fd)


def parse(spec: str | None, state_dir: str | os.PathLike | None = None) -> Metastore:
    """The metastore named by ``spec`` (else $FERRY_METASTORE, else ``state_dir``'s metastore.url, else the
    embedded Derby in ``state_dir``)."""
    spec = (spec or os.environ.get(ENV_METASTORE) or "").strip()
    if not spec and state_dir is not None and (named := Path(state_dir) / STATE_FILE).is_file():
        spec = named.read_text().strip()
        if spec and spec not in ("derby", "embedded"):
            return dataclasses.replace(parse(spec), origin=str(named.resolve()))
    if not spec or spec in ("derby", "embedded"):
        if state_dir is None:
            raise MetastoreError("no metastore given: --metastore URL, $FERRY_METASTORE or --state-dir DIR")
        return Metastore("derby", str(Path(state_dir).resolve() / "metastore_db"))
    if spec.startswith("derby:"):
        return Metastore("derby", str(Path(spec.removeprefix("derby:")).expanduser().resolve()))
    if spec.startswith("thrift://"):
        for uri in spec.split(","):
            parts = urlsplit(uri.strip())
            if parts.scheme != "thrift" or not parts.hostname:
                raise MetastoreError(f"metastore {uri!r}: expected thrift://HOST:PORT")
        return Metastore("thrift", spec)
    if spec.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(spec)
        if not parts.hostname or not parts.path.strip("/"):
            raise MetastoreError(f"metastore {_hide(spec)!r}: expected postgresql://USER[:PASSWORD]@HOST[:PORT]/DB")
        try:
            port = parts.port or 5432
        except ValueError:
            raise MetastoreError(f"metastore {_hide(spec)!r}: bad port") from None
        return Metastore("postgresql", f"jdbc:postgresql://{parts.hostname}:{port}/{parts.path.strip('/')}",
                         unquote(parts.username or ""), unquote(parts.password or ""))
    if spec.startswith("jdbc:postgresql://"):
        parts = urlsplit(spec.removeprefix("jdbc:"))
        query = parse_qs(parts.query)
        if not parts.hostname or not parts.path.strip("/"):
            raise MetastoreError(f"metastore {_hide(spec)!r}: expected jdbc:postgresql://HOST[:PORT]/DB")
        return Metastore("postgresql", f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}/"
                         f"{parts.path.strip('/')}", query.get("user", [""])[0], query.get("password", [""])[0])
    raise MetastoreError(f"metastore {_hide(spec)!r}: expected postgresql://USER@HOST[:PORT]/DB, "
                         "jdbc:postgresql://..., thrift://HOST:PORT or derby:DIR")


def name_for_state_dir(state_dir: str | os.PathLike, spec: str) -> None:
    """Record ``spec`` as the metastore of ``state_dir`` (what ``ferry demo`` does for its local PostgreSQL)."""
    parse(spec)  # refuse a bad spec now, not at the next reader
    path = Path(state_dir) / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # a spec may hold a password
    with os.fdopen(fd, "w") as f:
        f.write(spec + "\n")


def _hide(spec: str) -> str:
    """The spec without its password."""
    parts = urlsplit(spec)
    if parts.password:
        return spec.replace(":" + parts.password + "@", ":***@")
    return spec.split("password=")[0] + ("password=***" if "password=" in spec else "")


def explain(text: str) -> str | None:
    """One line for a Java/Spark failure that is really the metastore's (None when it is something else)."""
    for marker, line in (
        ("XSDB6", "the embedded Derby metastore is in use by another process (Derby admits one)"),
        ("Connection refused", "the metastore refused the connection (is PostgreSQL / the service running?)"),
        ("PSQLException", None),
        ("Unable to instantiate org.apache.hadoop.hive.ql.metadata.SessionHiveMetaStoreClient",
         "the Hive metastore could not be opened"),
    ):
        if marker in text:
            if line is None:
                for ln in text.splitlines():
                    if "PSQLException:" in ln:
                        return "metastore PostgreSQL: " + ln.split("PSQLException:", 1)[1].strip()[:300]
                continue
            return line
    return None
