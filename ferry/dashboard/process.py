"""`ferry dashboard` as a child process: how `ferry demo --keep-running` (and tests) run it next to the
pipeline, so the demo's own process stays free to wait for Ctrl-C and the dashboard dies with it."""

from __future__ import annotations

from pathlib import Path

from ferry.embedded import ManagedProcess, spawn_ferry, wait_for_port


def start_dashboard(log_file: Path, zookeeper: str, live_zookeepers: list[str], state_dir: Path | None,
                    host: str, port: int, timeout_s: float = 30.0, *, offline_only: bool = False,
                    command_config: Path | None = None, live_command_config: Path | None = None) -> ManagedProcess:
    """Spawn the dashboard and wait until it listens; the caller stops it (``.stop()``). The client settings
    travel as files' paths (``--command-config``), never as their content."""
    args = ["dashboard", "--zookeeper", zookeeper, "--listen", f"{host}:{port}"]
    if offline_only:
        args.append("--offline-only")
    for live in live_zookeepers:
        args += ["--live-zookeeper", live]
    if state_dir is not None:
        args += ["--state-dir", str(state_dir)]
    if command_config is not None:
        args += ["--command-config", str(command_config)]
    if live_command_config is not None:
        args += ["--live-command-config", str(live_command_config)]
    proc = spawn_ferry("dashboard", log_file, args)
    wait_for_port(host, port, timeout_s, proc.proc, proc.log_file)
    return proc
