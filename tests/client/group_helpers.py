"""Helpers for the consumer-group tests: topics written straight into ZooKeeper, owners read back."""

from __future__ import annotations

import time
from collections.abc import Callable

from kazoo.client import KazooClient

from ferry.client import group_dirs as dirs
from ferry.client.group_store import read_owners
from ferry.zk import TopicInfo, ZkConnect


def zk_client(zk_connect: str) -> KazooClient:
    from ferry.zk import connect

    return connect(ZkConnect.parse(zk_connect), timeout=10)


def write_topic(zk: KazooClient, name: str, partitions: int, leader: int = 1) -> None:
    """Register a topic the way the cluster registry does (no broker needed for ownership tests)."""
    info = TopicInfo.from_assignment(name, {p: (leader,) for p in range(partitions)})
    zk.ensure_path("/brokers/topics")
    zk.create(f"/brokers/topics/{name}", info.encode())


def owners(zk: KazooClient, group: str, topic: str | None = None) -> dict[tuple[str, int], str]:
    o = read_owners(zk, group)
    return {k: v for k, v in o.items() if topic is None or k[0] == topic}


def members(zk: KazooClient, group: str) -> list[str]:
    return sorted(zk.get_children(dirs.ids_dir(group)))


def wait_until(cond: Callable[[], object], timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last value {last!r})")


def by_owner(o: dict[tuple[str, int], str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for (_, p), c in sorted(o.items()):
        out.setdefault(c, []).append(p)
    return out


def close_both(*socks) -> None:
    """Shut down and close sockets, ignoring ones already gone."""
    import socket

    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            s.close()
        except OSError:
            pass


class TcpProxy:
    """A loopback TCP forwarder whose connections a test can cut (a network partition from ZooKeeper)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        import socket
        import threading

        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.blocked = False
        self.closed = False
        self._conns: list = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket

        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.blocked:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            self._forward(client, upstream)

    def _forward(self, client, upstream) -> None:
        """Copy both ways until either side closes (a subclass may inspect or drop traffic instead)."""
        import threading

        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src, dst, stop: Callable[[bytes], bool] | None = None) -> None:
        """Copy src to dst until either closes; ``stop(chunk)`` True closes both without passing it on."""
        try:
            while data := src.recv(65536):
                if stop is not None and stop(data):
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            close_both(src, dst)

    def cut(self) -> None:
        """Drop every connection and refuse new ones until restore()."""
        import socket

        self.blocked = True
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def restore(self) -> None:
        self.blocked = False

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()
