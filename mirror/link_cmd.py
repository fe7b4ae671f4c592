"""`ferry mirror link create|list|describe|pause|resume|delete`: the embedded mirror's links (docs/mirror.md).

A link lives in the offline cluster's ZooKeeper (`--zookeeper OFFLINE_ZK`, zk/mirror_links.py); the offline
brokers watch it and their partition leaders pull from the live cluster (mirror/embedded_link.py). Nothing here
talks to a broker: the commands only read and write the link's znode, and `describe` the progress the leaders
report next to it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ferry.mirror.copy_status import CopyRow, format_table
from ferry.mirror.link_status import link_doc, link_status
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.mirror_links import PAUSED, RUNNING, MirrorLink, MirrorLinkStore
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_tls import ZkTlsConfig

LINK_ACTIONS = ("create", "list", "describe", "pause", "resume", "delete")


def run_link(args: argparse.Namespace) -> int:
    """One link action; raises UsageError (exit 2) for bad input, the store's errors otherwise."""
    action = args.link_action
    if action is None:
        raise UsageError(f"`ferry mirror link` needs an action: {'|'.join(LINK_ACTIONS)}")
    if not args.zookeeper:
        raise UsageError("--zookeeper HOST:PORT/CHROOT (the offline cluster's) is required for `ferry mirror link`")
    if action != "list" and not args.name:
        raise UsageError(f"`ferry mirror link {action}` needs the link's NAME")
    if action == "create":
        link = _new_link(args)  # checked before connecting: a bad flag is exit 2 without ZooKeeper
    # a chroot nobody registered under is a typo, not a cluster: refused, nothing created there
    client = zk_connect(ZkConnect.parse(args.zookeeper), timeout=10.0, create_chroot=False)
    try:
        store = MirrorLinkStore(client)
        if action == "create":
            store.create(link)
            print(f"created mirror link {link.name}: {link.source_zookeeper} include {link.include!r}"
                  + (f" exclude {link.exclude!r}" if link.exclude else ""))
        elif action == "list":
            links = store.all()
            if args.json:
                print(json.dumps([link_doc(lk) for lk in links], indent=2))
            else:
                for lk in links:
                    print(f"{lk.name}\t{lk.state}\t{lk.source_zookeeper}\t{lk.include}"
                          + (f"\texclude {lk.exclude}" if lk.exclude else ""))
        elif action == "describe":
            link, _ = store.get(args.name)
            doc = link_status(client, link)
            print(json.dumps(doc, indent=2) if args.json else _describe(doc))
        elif action in ("pause", "resume"):
            store.get(args.name)  # UnknownLinkError first
            store.update(args.name, state=PAUSED if action == "pause" else RUNNING)
            print(f"mirror link {args.name}: {PAUSED if action == 'pause' else RUNNING}")
        else:
            store.delete(args.name)
            print(f"deleted mirror link {args.name}")
    finally:
        client.stop()
        client.close()
    return 0


def format_links(links: list[dict]) -> str:
    """`ferry mirror status`'s section on the embedded mirror: each link as `describe` shows it."""
    if not links:
        return "no mirror links in the offline cluster"
    return "\n".join(_describe(d) for d in links)


def _new_link(args: argparse.Namespace) -> MirrorLink:
    if not args.source_zookeeper:
        raise UsageError("--source-zookeeper HOST:PORT/CHROOT (the live cluster's) is required to create a link")
    if not args.include:
        raise UsageError("--include REGEX is required to create a link")
    source_config = None
    if args.source_config:
        path = Path(args.source_config).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"--source-config {args.source_config}: no such file")
        source_config = str(path)
    zk_config = None
    if getattr(args, "source_zk_tls_config_file", None):
        zk_path = Path(args.source_zk_tls_config_file).resolve()
        ZkTlsConfig.from_file(str(zk_path))  # a bad file: one line now, not a link that fails on every broker
        zk_config = str(zk_path)
    return MirrorLink(args.name, args.source_zookeeper, args.include, args.exclude, source_config,
                      source_zookeeper_config=zk_config).validate()


def _describe(doc: dict) -> str:
    lines = [f"link {doc['name']}: {doc['state']}", f"  source zookeeper  {doc['source_zookeeper']}",
             f"  include           {doc['include']}"]
    if doc["exclude"]:
        lines.append(f"  exclude           {doc['exclude']}")
    if doc["source_config"]:
        lines.append(f"  source config     {doc['source_config']}")
    if doc.get("source_zookeeper_config"):
        lines.append(f"  source zk tls     {doc['source_zookeeper_config']}")
    for f in doc.get("failures", ()):
        lines.append(f"  broker {f['broker']:<10} failed: {f['error']}")
    pid = doc["producer_id"]
    lines.append(f"  producer id       {pid if pid >= 0 else '(not yet allocated)'}")
    progress = doc["partitions"]
    if not progress:
        lines.append("  no partition copied yet")
        return "\n".join(lines)
    rows = [CopyRow.from_report(p) for p in progress]
    lines.append(f"  total lag         {sum(r.lag for r in rows if r.lag is not None)} message(s)")
    return "\n".join(lines + format_table(rows, "LEADER", "  "))
