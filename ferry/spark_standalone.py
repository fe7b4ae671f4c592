"""A Spark standalone cluster (a master and its workers) as local processes, from the Spark that the pinned
PySpark wheel ships (``<pyspark>/bin/spark-class``; nothing downloaded): for tests, benchmarks and demos of
``ferry load --master spark://...``. Same harness as the brokers (ManagedProcess: a log file per process,
its own session so a kill takes the JVM and its children, bounded waits)."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

from ferry.zk.local_process import EmbeddedError, ManagedProcess, free_port, tail_log, wait_for_port


def spark_home() -> Path:
    """The directory of the installed pyspark package: it holds bin/spark-class and the jars."""
    import pyspark  # not a ferry module: the wheel's location, only when a cluster is started

    return Path(pyspark.__file__).resolve().parent


def spark_env(host: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=host, SPARK_NO_DAEMONIZE="1")
    return env


class SparkMaster:
    """`spark-class org.apache.spark.deploy.master.Master` on ``host``: its RPC port (``url``) and its web UI,
    whose ``/json/`` lists the workers and applications."""

    def __init__(self, log_dir: str | Path, host: str = "127.0.0.1", port: int | None = None,
                 webui_port: int | None = None, recovery_dir: str | Path | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.webui_port = webui_port or free_port(host)
        self.log_file = Path(log_dir).resolve() / "spark-master.out"
        self.recovery_dir = Path(recovery_dir).resolve() if recovery_dir else None
        self.process = ManagedProcess("spark-master", self.log_file)

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def _env(self) -> dict[str, str]:
        """With a recovery directory the master keeps its workers and applications there
        (``spark.deploy.recoveryMode=FILESYSTEM``), so a restarted master takes them back."""
        env = spark_env(self.host)
        if self.recovery_dir is not None:
            self.recovery_dir.mkdir(parents=True, exist_ok=True)
            env["SPARK_MASTER_OPTS"] = ("-Dspark.deploy.recoveryMode=FILESYSTEM "
                                        f"-Dspark.deploy.recoveryDirectory={self.recovery_dir}")
        return env

    def start(self, timeout: float = 90.0) -> SparkMaster:
        self.process.spawn([str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master",
                            "--host", self.host, "--port", str(self.port), "--webui-port", str(self.webui_port)],
                           env=self._env())
        wait_for_port(self.host, self.port, timeout, self.process.proc, self.log_file)
        wait_for_port(self.host, self.webui_port, timeout, self.process.proc, self.log_file)
        return self

    def restart(self, timeout: float = 90.0) -> SparkMaster:
        """Stop the master and start it again on the same ports (its workers re-register)."""
        self.stop()
        return self.start(timeout)

    def state(self, attempts: int = 5) -> dict:
        """The master's JSON (workers, their state, cores used; active and completed applications); a
        half-written answer (seen on a loaded machine) is asked again, a few times."""
        for attempt in range(attempts):
            try:
                with urllib.request.urlopen(f"{self.webui}/json/", timeout=5) as r:
                    return json.load(r)
            except ValueError:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2)
        raise AssertionError("unreachable")

    def alive_workers(self) -> list[dict]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def wait_workers(self, n: int, timeout: float = 90.0) -> list[dict]:
        """Wait until ``n`` workers are ALIVE at the master (a killed worker turns DEAD after its timeout)."""
        deadline = time.monotonic() + timeout
        alive: list[dict] = []
        while time.monotonic() < deadline:
            if not self.process.running:
                raise EmbeddedError("spark master exited" + tail_log(self.log_file))
            try:
                alive = self.alive_workers()
            except (OSError, ValueError):
                alive = []
            if len(alive) >= n:
                return alive
            time.sleep(0.5)
        raise EmbeddedError(f"{len(alive)} of {n} spark workers alive at {self.url} after {timeout:.0f}s"
                            + tail_log(self.log_file))

    def stop(self, timeout: float = 15.0) -> None:
        self.process.stop(timeout)


class SparkWorker:
    """`spark-class org.apache.spark.deploy.worker.Worker MASTER` with its cores, memory and work directory;
    its executors (JVMs and their Python workers) are its children, in its process group."""

    def __init__(self, name: str, master_url: str, work_dir: str | Path, host: str = "127.0.0.1",
                 cores: int = 1, memory: str = "1g", webui_port: int | None = None,
                 local_dir: str | Path | None = None) -> None:
        self.name, self.master_url, self.host = name, master_url, host
        self.cores, self.memory = cores, memory
        self.work_dir = Path(work_dir).resolve()
        # the executors' scratch space (SPARK_LOCAL_DIRS): the work dir's disk unless given
        self.local_dir = Path(local_dir).resolve() if local_dir else self.work_dir / "local"
        self.webui_port = webui_port or free_port(host)
        self.log_file = self.work_dir.parent / f"{name}.out"
        self.process = ManagedProcess(name, self.log_file)

    @property
    def webui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process.running

    def start(self, timeout: float = 90.0) -> SparkWorker:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.local_dir.mkdir(parents=True, exist_ok=True)
        env = dict(spark_env(self.host), SPARK_LOCAL_DIRS=str(self.local_dir))
        self.process.spawn([str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker",
                            self.master_url, "--host", self.host, "--cores", str(self.cores),
                            "--memory", self.memory, "--webui-port", str(self.webui_port),
                            "--work-dir", str(self.work_dir)], env=env)
        wait_for_port(self.host, self.webui_port, timeout, self.process.proc, self.log_file)
        return self

    def kill_group(self) -> None:
        """SIGKILL the worker and its executors (its whole process group): a machine lost mid-load."""
        if self.process.proc is not None and self.process.running:
            os.killpg(self.process.proc.pid, 9)
            self.process.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the worker stops its executors), then the group's leftovers are killed."""
        self.process.stop(timeout)
        if self.process.proc is not None:
            try:
                os.killpg(self.process.proc.pid, 9)
            except ProcessLookupError:
                pass


class SparkStandalone:
    """A master and ``workers`` workers of ``cores``/``memory`` each, under ``root`` (logs, work dirs)."""

    def __init__(self, root: str | Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 host: str = "127.0.0.1", recovery: bool = False) -> None:
        self.root = Path(root).resolve()
        self.master = SparkMaster(self.root, host, recovery_dir=self.root / "recovery" if recovery else None)
        self.workers = [SparkWorker(f"spark-worker-{i}", self.master.url, self.root / f"worker-{i}", host,
                                    cores, memory) for i in range(1, workers + 1)]

    @property
    def url(self) -> str:
        return self.master.url

    def start(self, timeout: float = 120.0) -> SparkStandalone:
        try:
            self.master.start(timeout)
            for w in self.workers:
                w.start(timeout)
            self.master.wait_workers(len(self.workers), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        self.master.stop()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
