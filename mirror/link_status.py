"""The embedded mirror's links as `ferry mirror link describe`, `ferry mirror status` and the dashboard show them:
each link as stored, its state as the offline brokers report it, and its partitions' last reports as rows of
the table both mirror kinds share (mirror/copy_status.py). Read from the offline cluster's ZooKeeper alone.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from ferry.mirror.copy_status import CopyRow
from ferry.mirror.link_progress import link_state, read_failures, read_progress
from ferry.zk import connect as zk_connect
from ferry.zk.mirror_links import MirrorLink, MirrorLinkStore
from ferry.zk.zk_connect import ZkConnect


def links_status(offline_zookeeper: str, timeout_s: float = 10.0) -> list[dict]:
    """Every link of the offline cluster with its partitions' last reports."""
    client = zk_connect(ZkConnect.parse(offline_zookeeper), timeout=timeout_s, create_chroot=False)
    try:
        return [link_status(client, lk) for lk in MirrorLinkStore(client).all()]
    finally:
        client.stop()
        client.close()


def link_doc(link: MirrorLink) -> dict:
    """The link as stored (no secret: the --source-config is a path on the brokers)."""
    return {"name": link.name, "state": link.state, "source_zookeeper": link.source_zookeeper,
            "include": link.include, "exclude": link.exclude, "source_config": link.source_config,
            "source_zookeeper_config": link.source_zookeeper_config, "source_cluster": link.source_cluster,
            "producer_id": link.producer_id}


def link_status(client: KazooClient, link: MirrorLink) -> dict:
    """The link as stored, its state as the brokers report it ("failed: <reason>" while one cannot run it:
    ``failures`` names them), its total lag and its partitions' last reports (with the shared table's fields)."""
    failures = read_failures(client, link.name)
    progress = read_progress(client, link.name)
    rows = [CopyRow.from_report(p) for p in progress]
    return {**link_doc(link), "state": link_state(link.state, failures), "failures": failures,
            "total_lag": sum(r.lag for r in rows if r.lag is not None),
            "partitions": [{**r.to_dict(), **p, "owner": str(p["broker"])} for p, r in zip(progress, rows, strict=True)]}
