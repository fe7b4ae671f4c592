"""Ansible connection plugin: run tasks in a local container with `docker exec` (ferry's test hosts).

ansible-core ships no Docker connection and the `community.docker` collection cannot be fetched here
(no Galaxy), so ferry carries this small one. It needs only the `docker` CLI on the controller and
`/bin/sh` + `cat` in the container. Files travel through the exec's stdin/stdout, so it works for any
user and with pipelining. Select it with `ansible_connection: ferry_docker` and `ansible_host: <container>`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

DOCUMENTATION = """
    name: ferry_docker
    short_description: run tasks in a local Docker container through the docker CLI
    description:
        - Runs commands with C(docker exec -i) and moves files through the exec's standard streams.
    author: ferry
    options:
      remote_addr:
        description: The name or id of the container.
        type: string
        default: inventory_hostname
        vars:
          - name: inventory_hostname
          - name: ansible_host
          - name: ansible_docker_host
      remote_user:
        description: The user to run as inside the container; by default the image's user.
        type: string
        vars:
          - name: ansible_user
          - name: ansible_docker_user
        keyword:
          - name: remote_user
      docker_cli:
        description: The docker client binary.
        type: string
        default: docker
        vars:
          - name: ansible_docker_cli
        env:
          - name: FERRY_DOCKER_CLI
      exec_timeout:
        description: Seconds one docker exec may take before it is abandoned (a whole task, not a connect).
        type: int
        default: 1800
        vars:
          - name: ansible_docker_exec_timeout
    extends_documentation_fragment:
      - connection_pipelining
"""

display = Display()


class Connection(ConnectionBase):
    """`docker exec` into a running container."""

    transport = "ferry_docker"
    has_pipelining = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._docker: str | None = None

    def _container(self) -> str:
        return self.get_option("remote_addr")

    def _base(self, interactive: bool) -> list[str]:
        cmd = [self._docker or "docker", "exec"]
        if interactive:
            cmd.append("-i")
        user = self.get_option("remote_user")
        if user:
            cmd += ["-u", user]
        return cmd + [self._container()]

    def _connect(self) -> Connection:
        if self._connected:
            return self
        docker = shutil.which(self.get_option("docker_cli"))
        if docker is None:
            raise AnsibleConnectionFailure(f"docker CLI {self.get_option('docker_cli')!r} not found on the controller")
        self._docker = docker
        probe = subprocess.run([docker, "inspect", "-f", "{{.State.Running}}", self._container()],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode != 0 or probe.stdout.strip() != "true":
            raise AnsibleConnectionFailure(f"container {self._container()!r} is not running: "
                                           f"{(probe.stderr or probe.stdout).strip()}")
        display.vvv(f"ESTABLISH DOCKER EXEC to {self._container()}", host=self._container())
        self._connected = True
        return self

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = False):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        self._connect()
        executable = self._play_context.executable or "/bin/sh"
        argv = self._base(interactive=True) + [executable, "-c", cmd]
        display.vvv(f"EXEC {shlex.join(argv)}", host=self._container())
        try:
            p = subprocess.run(argv, input=in_data or b"", capture_output=True, timeout=self.get_option("exec_timeout"))
        except subprocess.TimeoutExpired as e:
            raise AnsibleConnectionFailure(f"docker exec in {self._container()} timed out") from e
        return p.returncode, p.stdout, p.stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        self._connect()
        if not os.path.exists(to_bytes(in_path)):
            raise AnsibleFileNotFound(f"file to upload does not exist: {in_path}")
        display.vvv(f"PUT {in_path} TO {out_path}", host=self._container())
        argv = self._base(interactive=True) + ["/bin/sh", "-c", f"cat > {shlex.quote(out_path)}"]
        with open(to_bytes(in_path), "rb") as f:
            p = subprocess.run(argv, stdin=f, capture_output=True, timeout=self.get_option("exec_timeout"))
        if p.returncode != 0:
            raise AnsibleError(f"failed to write {out_path} in {self._container()}: {p.stderr.decode(errors='replace')}")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        self._connect()
        display.vvv(f"FETCH {in_path} TO {out_path}", host=self._container())
        argv = self._base(interactive=False) + ["cat", in_path]
        with open(to_bytes(out_path), "wb") as f:
            p = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, timeout=self.get_option("exec_timeout"))
        if p.returncode != 0:
            raise AnsibleError(f"failed to read {in_path} in {self._container()}: {p.stderr.decode(errors='replace')}")

    def reset(self) -> None:
        self.close()

    def close(self) -> None:
        self._connected = False
