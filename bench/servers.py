"""The systems under test, started and stopped by the benchmark itself (never left running as services).

Each server gets a fresh directory under the run's temp dir, listens on 127.0.0.1 only, and is stopped
in `stop()` (SIGTERM, then SIGKILL after a bounded wait). `pids()` names the processes whose RSS and
CPU are sampled; `data_dir` is what "bytes on disk" measures.

- ferry: Debian's ZooKeeper + one `ferry broker` (ferry.embedded).
- RabbitMQ (Debian `rabbitmq-server`): our own epmd on a free loopback port, node name
  `bench@localhost`, AMQP and distribution listeners on 127.0.0.1, mnesia/log dirs in the temp dir.
- ActiveMQ (Debian `activemq` 5.17): the JVM started directly with our own activemq.xml: one STOMP
  (NIO) connector on 127.0.0.1, KahaDB persistence in the temp dir, JMX and advisories off. KahaDB's
  journal is fsynced periodically (every 200 ms), like ferry's default flush (10,000 messages or
  200 ms); with its default (fsync per persistent message) it runs at the disk's fsync rate here
  (~0.7 ms per fsync, ~1,300 msg/s), which would compare durability settings, not designs.
  Heap 1 GB with a 256 MB memory limit, so queues of hundreds of thousands of messages page out to
  KahaDB instead of filling the heap (with 512 MB and no limit the JVM ended up collecting garbage
  while producers stalled).
  (Debian's build has no AMQP 1.0 module, and OpenWire has no maintained Python client: STOMP it is.)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ferry.embedded import (  # noqa: E402
    BrokerProcess,
    EmbeddedError,
    ZooKeeperServer,
    free_port,
    wait_for_port,
)

HOST = "127.0.0.1"



def scratch_zookeeper(prefix: str, parent: str | None = None) -> tuple[Path, ZooKeeperServer]:
    """A bench's temporary directory and a ZooKeeper started in it. SIGTERM becomes SystemExit, so a terminated
    bench still runs its finally blocks (servers stopped, directory removed); the working directory moves to the
    system's temporary one, since `python -m` puts it first on a broker's path (a checkout's ferry/ would win
    over PYTHONPATH)."""
    import tempfile

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.chdir(tempfile.gettempdir())
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    return tmp, ZooKeeperServer(data_dir=tmp / "zk").start()



def drop_scratch(tmp: Path, zk: ZooKeeperServer, brokers: list[BrokerProcess]) -> None:
    """scratch_zookeeper's end: the brokers, then ZooKeeper stopped, the directory removed."""
    for b in brokers:
        b.stop()
    zk.stop()
    shutil.rmtree(tmp, ignore_errors=True)


class ServerError(RuntimeError):
    """A peer broker is missing or did not start."""


def _tail(path: Path, lines: int = 25) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"\n--- last lines of {path} ---\n" + "\n".join(text)


def _terminate(proc: subprocess.Popen | None, timeout: float = 20.0) -> None:
    """SIGTERM, wait, then SIGKILL: bounded, and never touches anything we did not start."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _spawn(argv: list[str], log_file: Path, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> subprocess.Popen:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)


class FerryServer:
    """ZooKeeper + one ferry broker (the paper's single-broker setup)."""

    name = "ferry"

    def __init__(self, root: Path, broker_args: tuple[str, ...] = (), chroot: str = "/ferry/bench") -> None:
        self.root = root
        self.zk = ZooKeeperServer(data_dir=root / "zookeeper")
        self.chroot = chroot
        self.broker_args = broker_args
        self.broker: BrokerProcess | None = None

    @property
    def zk_connect(self) -> str:
        return f"{self.zk.connect}{self.chroot}"

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap

    @property
    def data_dir(self) -> Path:
        return self.root / "broker-1" / "data"

    def start(self) -> FerryServer:
        self.zk.start()
        self.broker = BrokerProcess(1, self.data_dir, self.zk_connect, "bench", extra_args=self.broker_args)
        self.broker.start(timeout=60)
        return self

    def pids(self) -> list[int]:
        return [self.broker.pid] if self.broker and self.broker.pid else []

    def create_queue(self, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        """A topic with one partition (one log: the paper's setup), visible to the broker before return;
        ``config``: topic settings (compression.type ...)."""
        from ferry.zk import ClusterRegistry

        reg = ClusterRegistry(self.zk_connect)
        reg.start()
        try:
            reg.create_topic(name, partitions, config)
        finally:
            reg.stop()
        self._wait_topic(name)

    def _wait_topic(self, name: str, timeout: float = 30.0) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            md = admin.list_topics(topic=name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and t.partitions and all(
                    p.leader >= 0 for p in t.partitions.values()):
                return
            time.sleep(0.1)
        raise ServerError(f"broker never served topic {name}")

    def stop(self) -> None:
        try:
            if self.broker is not None:
                self.broker.stop(timeout=30)
        finally:
            self.zk.stop()

    def log_files(self) -> list[Path]:
        return [self.root / "broker-1.out", self.zk.log_file]


class RabbitMQServer:
    """Debian's RabbitMQ as a child process, everything (AMQP, epmd, distribution) on loopback."""

    name = "rabbitmq"
    SERVER = Path("/usr/lib/rabbitmq/bin/rabbitmq-server")

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.epmd: subprocess.Popen | None = None
        self.proc: subprocess.Popen | None = None
        self.log_file = root / "rabbitmq.out"

    @property
    def data_dir(self) -> Path:
        return self.root / "mnesia"

    def _env(self) -> dict[str, str]:
        r = self.root
        env = dict(os.environ)
        env.update({
            "HOME": str(r / "home"),  # the Erlang cookie lands here, not in root's home
            "ERL_EPMD_ADDRESS": HOST,
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": "bench@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "RABBITMQ_MNESIA_BASE": str(self.data_dir),
            "RABBITMQ_LOG_BASE": str(r / "log"),
            "RABBITMQ_CONFIG_FILE": str(r / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(r / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(r / "enabled_plugins"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(r / "plugins-expand"),
            "RABBITMQ_CONF_ENV_FILE": str(r / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(r / "rabbitmq.pid"),
        })
        return env

    def start(self, timeout: float = 90.0) -> RabbitMQServer:
        if not self.SERVER.exists():
            raise ServerError("RabbitMQ needs Debian's `rabbitmq-server` package (apt-get install -y rabbitmq-server)")
        r = self.root
        (r / "home").mkdir(parents=True, exist_ok=True)
        (r / "rabbitmq.conf").write_text(f"listeners.tcp.1 = {HOST}:{self.port}\nloopback_users = none\n")
        (r / "advanced.config").write_text("[].\n")
        (r / "enabled_plugins").write_text("[].\n")
        (r / "rabbitmq-env.conf").write_text("")
        self.epmd = _spawn(["epmd", "-address", HOST, "-port", str(self.epmd_port)], r / "epmd.out")
        wait_for_port(HOST, self.epmd_port, 10, self.epmd)
        self.proc = _spawn([str(self.SERVER)], self.log_file, env=self._env(), cwd=r)
        try:
            wait_for_port(HOST, self.port, timeout, self.proc)
            self._wait_amqp(timeout)
        except (EmbeddedError, ServerError) as e:
            raise ServerError(f"RabbitMQ did not start: {e}" + _tail(self.log_file)) from None
        return self

    def _wait_amqp(self, timeout: float) -> None:
        import pika

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pika.BlockingConnection(self.parameters()).close()
                return
            except Exception:  # noqa: BLE001 - still booting
                time.sleep(0.2)
        raise ServerError("RabbitMQ never accepted an AMQP connection")

    def parameters(self):
        import pika

        return pika.ConnectionParameters(host=HOST, port=self.port, heartbeat=0, blocked_connection_timeout=60)

    def pids(self) -> list[int]:
        """The Erlang VM (beam.smp, a child of the start script), not the shell around it."""
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        beams = [k.pid for k in kids if k.name().startswith("beam")]
        return beams or [self.proc.pid]

    def create_queue(self, name: str) -> None:
        import pika

        conn = pika.BlockingConnection(self.parameters())
        try:
            conn.channel().queue_declare(name, durable=True)
        finally:
            conn.close()

    def stop(self) -> None:
        try:
            # SIGTERM to the VM itself: the script's shell does not forward it.
            for pid in self.pids():
                if self.proc is not None and pid != self.proc.pid:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            self._kill_tree()
        finally:
            _terminate(self.epmd, timeout=5)

    def _kill_tree(self) -> None:
        """Whatever of our process group survived the graceful stop (session started by us)."""
        import psutil

        if self.proc is None:
            return
        try:
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            kids = []
        for k in kids:
            try:
                k.kill()
            except psutil.NoSuchProcess:
                pass
        _terminate(self.proc, timeout=5)

    def log_files(self) -> list[Path]:
        return [self.log_file]


ACTIVEMQ_XML = """<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="bench"
          persistent="true" advisorySupport="false" dataDirectory="{data}">
    <persistenceAdapter>
      <kahaDB directory="{data}/kahadb" journalDiskSyncStrategy="periodic" journalDiskSyncInterval="200"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="256 mb"/></memoryUsage>
        <storeUsage><storeUsage limit="50 gb"/></storeUsage>
        <tempUsage><tempUsage limit="5 gb"/></tempUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp+nio://{host}:{port}?transport.tcpNoDelay=true"/>
    </transportConnectors>
  </broker>
</beans>
"""


class ActiveMQServer:
    """Debian's ActiveMQ 5.17: one JVM with our own config (STOMP on loopback, KahaDB in the temp dir)."""

    name = "activemq"
    JAR = Path("/usr/share/activemq/bin/activemq.jar")
    HOME = Path("/usr/share/activemq")

    def __init__(self, root: Path, heap_mb: int = 1024) -> None:
        self.root = root
        self.port = free_port()
        self.heap_mb = heap_mb
        self.proc: subprocess.Popen | None = None
        self.log_file = root / "activemq.out"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    def start(self, timeout: float = 90.0) -> ActiveMQServer:
        if not self.JAR.exists() or shutil.which("java") is None:
            raise ServerError("ActiveMQ needs Debian's `activemq` package (apt-get install -y activemq)")
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").mkdir(exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        xml = conf / "activemq.xml"
        xml.write_text(ACTIVEMQ_XML.replace("{data}", str(self.data_dir)).replace("{host}", HOST)
                       .replace("{port}", str(self.port)))
        (conf / "log4j2.properties").write_text("rootLogger.level = WARN\n")
        argv = ["java", f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m",
                f"-Dactivemq.home={self.HOME}", f"-Dactivemq.base={self.root}", f"-Dactivemq.conf={conf}",
                f"-Dactivemq.data={self.data_dir}", f"-Dactivemq.classpath={conf}",
                f"-Djava.io.tmpdir={self.root / 'tmp'}",
                "-jar", str(self.JAR), "start", f"xbean:file:{xml}"]
        self.proc = _spawn(argv, self.log_file, cwd=self.root)
        try:
            wait_for_port(HOST, self.port, timeout, self.proc)
        except EmbeddedError as e:
            raise ServerError(f"ActiveMQ did not start: {e}" + _tail(self.log_file)) from None
        return self

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []

    def create_queue(self, name: str) -> None:
        """ActiveMQ creates queues on first use; nothing to do."""

    def stop(self) -> None:
        _terminate(self.proc, timeout=30)

    def log_files(self) -> list[Path]:
        return [self.log_file]
