"""Is a ferry broker ready? Exit 0 when /brokers/ids/<id> is registered in its cluster's ZooKeeper with the
expected address AND the broker answers a Kafka Metadata request that lists itself; else retry until the
timeout and exit 1 saying what was missing. Used by the Ansible broker role and rolling_restart.yml, so
that the next broker is restarted only when this one serves clients again.

    ferry-broker-ready --id N --zookeeper HOST:PORT/chroot --bootstrap HOST:PORT [--timeout S] [--command-config F]

--command-config: librdkafka properties (security.protocol, sasl.*, ssl.*) for the Metadata request on a
SASL_SSL listener; $FERRY_ZOOKEEPER_CREDENTIALS and $FERRY_ZOOKEEPER_TLS_CONFIG: how to reach ZooKeeper.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time


def registered(zookeeper: str, broker_id: int, timeout: float) -> str | None:
    """The registration as 'host:port', or None if the znode is missing. ferry's own ZooKeeper client: the digest
    identity of $FERRY_ZOOKEEPER_CREDENTIALS and the TLS settings of $FERRY_ZOOKEEPER_TLS_CONFIG, as every ferry
    process."""
    from ferry.zk.kazoo_client import connect

    zk = connect(zookeeper, timeout=timeout, create_chroot=False)
    try:
        data, _ = zk.get(f"/brokers/ids/{broker_id}") if zk.exists(f"/brokers/ids/{broker_id}") else (None, None)
    finally:
        zk.stop()
        zk.close()
    if data is None:
        return None
    info = json.loads(data)
    return f"{info['host']}:{info['port']}"


def client_settings(path: str) -> dict[str, str]:
    """librdkafka properties of a key=value file ('' = none: a PLAINTEXT listener)."""
    if not path:
        return {}
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith(("#", "!"))]
    return dict(ln.split("=", 1) for ln in lines)


def metadata_brokers(bootstrap: str, timeout: float, settings: dict[str, str]) -> set[int]:
    """Broker ids in a Metadata response from `bootstrap` (raises on no answer)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**settings, "bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0})
    return set(admin.list_topics(timeout=timeout).brokers)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--id", type=int, required=True)
    ap.add_argument("--zookeeper", required=True)
    ap.add_argument("--bootstrap", required=True, help="the broker's advertised HOST:PORT")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--command-config", default="", help="client properties file (SASL_SSL)")
    args = ap.parse_args()
    settings = client_settings(args.command_config)
    logging.basicConfig(level=logging.CRITICAL)
    deadline = time.monotonic() + args.timeout
    problem = "not checked"
    while time.monotonic() < deadline:
        try:
            where = registered(args.zookeeper, args.id, timeout=5)
            if where is None:
                problem = f"/brokers/ids/{args.id} is not registered"
            elif where != args.bootstrap:
                problem = f"/brokers/ids/{args.id} says {where}, expected {args.bootstrap}"
            elif args.id not in (ids := metadata_brokers(args.bootstrap, timeout=5, settings=settings)):
                problem = f"Metadata from {args.bootstrap} lists brokers {sorted(ids)}, not {args.id}"
            else:
                print(f"broker {args.id} ready: registered at {where}, answers Metadata")
                return 0
        except Exception as e:  # ZooKeeper or the broker not answering yet: keep waiting
            problem = f"{type(e).__name__}: {e}"
        time.sleep(1)
    print(f"broker {args.id} not ready after {args.timeout:.0f}s: {problem}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
