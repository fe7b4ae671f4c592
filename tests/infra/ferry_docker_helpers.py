"""Docker helpers shared by tests/infra and tests/integration.

- `docker_or_skip()`: the only reason these tests skip is that no Docker engine answers.
- `build_images(...)`: runs infra/images/build.sh (reuses images whose content hash is unchanged).
- `DockerHosts`: containers on the project's own internal networks, named with a per-run prefix so
  that several runs (and several people) share one engine; everything is removed at teardown.

The docker CLI is used throughout: every call has a timeout, and what a test did can be replayed by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "infra" / "images" / "build.sh"
IMAGES_ENV = ROOT / "infra" / "images" / "build" / "images.env"


class DockerError(RuntimeError):
    """A docker command failed; the message carries its output."""


def docker(*args: str, timeout: float = 120, check: bool = True, input: bytes | None = None
           ) -> subprocess.CompletedProcess:
    """Run `docker ARGS...` with a timeout; raise DockerError with the output on failure."""
    p = subprocess.run(["docker", *args], capture_output=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise DockerError(f"docker {' '.join(args)} -> {p.returncode}\n"
                          f"{p.stdout.decode(errors='replace')}{p.stderr.decode(errors='replace')}")
    return p


def docker_or_skip() -> None:
    """Skip the calling test (or fixture) when no Docker engine is reachable; nothing else skips."""
    if shutil.which("docker") is None:
        pytest.skip("no Docker engine reachable: the docker CLI is not installed")
    try:
        p = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.skip("no Docker engine reachable: `docker info` timed out")
    if p.returncode != 0 or not p.stdout.strip():
        pytest.skip(f"no Docker engine reachable: {p.stderr.decode(errors='replace').strip()[:300]}")


def build_images(*targets: str, timeout: float = 1800) -> dict[str, str]:
    """Build (or reuse) images with infra/images/build.sh; returns its images.env as a dict."""
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(BUILD_SCRIPT), *targets], capture_output=True, text=True, timeout=timeout,
                       cwd=ROOT)
    if p.returncode != 0:
        raise DockerError(f"infra/images/build.sh {' '.join(targets)} failed:\n{p.stdout}\n{p.stderr}")
    print(f"\n[images] build.sh {' '.join(targets)}: {time.monotonic() - t0:.1f}s\n{p.stdout}")
    env = {}
    for line in IMAGES_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key:
            env[key] = value
    return env


@dataclass
class DockerHosts:
    """Containers and networks of one test run, all removed by `cleanup()`."""

    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"org.ferry.test={self.run_id}"

    def name(self, host: str) -> str:
        return f"ferry-{self.run_id}-{host}"

    def network(self, name: str, internal: bool = True) -> str:
        """A user-defined bridge network; internal: no route out of it (only the project's own hosts)."""
        full = f"{name}-{self.run_id}"
        args = ["network", "create", "--label", self.label]
        if internal:
            args.append("--internal")
        docker(*args, full)
        self.networks.append(full)
        return full

    def run(self, host: str, image: str, networks: list[str], command: list[str] | None = None,
            systemd: bool = False, env: dict[str, str] | None = None, extra: list[str] | None = None) -> str:
        """Start a container called `host` on its networks (the name `host` resolves on each of them)."""
        name = self.name(host)
        args = ["run", "-d", "--name", name, "--hostname", host, "--label", self.label,
                "--network", networks[0], "--network-alias", host]
        if systemd:
            # systemd as PID 1 needs CAP_SYS_ADMIN (it mounts its cgroup hierarchy) and a private cgroup
            # namespace; --privileged is not available on this engine (no CAP_SYS_RESOURCE to hand out).
            args += ["--cap-add", "SYS_ADMIN", "--cgroupns", "private", "--tmpfs", "/run", "--tmpfs", "/run/lock"]
        for k, v in (env or {}).items():
            args += ["-e", f"{k}={v}"]
        args += extra or []
        args.append(image)
        args += command if command is not None else (["/sbin/init"] if systemd else [])
        docker(*args, timeout=120)
        self.containers.append(name)
        for net in networks[1:]:
            docker("network", "connect", "--alias", host, net, name)
        return name

    def wait_systemd(self, host: str, timeout: float = 60) -> None:
        """Wait until systemd in the container finished booting."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            p = docker("exec", self.name(host), "systemctl", "is-system-running", check=False, timeout=30)
            state = p.stdout.decode().strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise DockerError(f"systemd in {host} not up after {timeout:.0f}s (state {state!r})")

    def exec(self, host: str, *cmd: str, timeout: float = 120, check: bool = True, input: bytes | None = None
             ) -> subprocess.CompletedProcess:
        """`docker exec` in a host (stdin attached only when `input` is given)."""
        flags = ["-i"] if input is not None else []
        return docker("exec", *flags, self.name(host), *cmd, timeout=timeout, check=check, input=input)

    def logs(self, host: str, tail: int = 200) -> str:
        p = docker("logs", "--tail", str(tail), self.name(host), check=False, timeout=30)
        return (p.stdout + p.stderr).decode(errors="replace")

    def cleanup(self) -> None:
        if os.environ.get("FERRY_KEEP_CONTAINERS"):
            print(f"[docker] FERRY_KEEP_CONTAINERS set: leaving {self.containers} {self.networks}")
            return
        if self.containers:
            docker("rm", "-f", "-v", *self.containers, check=False, timeout=180)
        for net in self.networks:
            docker("network", "rm", net, check=False, timeout=60)
        self.containers.clear()
        self.networks.clear()
