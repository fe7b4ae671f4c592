"""Real pieces started as local processes (ZooKeeper, brokers, the mirror): one harness for demo, tests and
benchmarks. Every wait is bounded in time and a failure quotes the process's own log."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

log = logging.getLogger("ferry.process")

class EmbeddedError(RuntimeError):
    """A local process did not start or stop as expected."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on loopback (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen | None = None,
                  log_file: Path | None = None) -> None:
    """Poll until something accepts on host:port; fail early if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise EmbeddedError(f"process exited with {proc.returncode} before listening on {host}:{port}"
                                + tail_log(log_file))
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise EmbeddedError(f"nothing listening on {host}:{port} after {timeout:.0f}s" + tail_log(log_file))


def tail_log(path: Path | None, lines: int = 30) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n--- last lines of " + str(path) + " ---\n" + "\n".join(text)


class ManagedProcess:
    """A child process with a log file, stopped with SIGTERM (then SIGKILL) or killed outright."""

    def __init__(self, name: str, log_file: Path) -> None:
        self.name = name
        self.log_file = log_file
        self.proc: subprocess.Popen | None = None

    def spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start ``argv`` in its own session, stdout and stderr appended to the log file."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_file, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        try:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        finally:
            out.close()


    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self, timeout: float = 15.0) -> None:
        """Graceful stop: SIGTERM, then SIGKILL after `timeout` seconds."""
        if not self.running:
            return
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.warning("%s did not stop in %.0fs; killing", self.name, timeout)
            self.kill()

    def kill(self) -> None:
        """SIGKILL: the crash a test wants to survive."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the process hangs (a network partition seen from outside)."""
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self):
        self.start()  # type: ignore[attr-defined]
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
