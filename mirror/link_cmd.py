"""`ferry mirror link create|list|describe|pause|resume|delete`: the embedded mirror's links (docs/mirror.md).

A link lives in the offline cluster's ZooKeeper (`--zookeeper OFFLINE_ZK`, zk/mirror_links.py); the offline
brokers watch it and their partition leaders pull from the live cluster (mirror/embedded_link.py). Nothing here
talks to a broker: the commands only read and write the link's znode, and `describe` the progress the leaders
report next to it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from ferry.mirror.copy_status import CopyRow, format_table
from ferry.mirror.link_status import link_doc, link_status
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.mirror_links import PAUSED, RUNNING, MirrorLink, MirrorLinkStore
from ferry.zk.zk_connect import ZkConnect
from ferry.zk.zk_tls import ZkTlsConfig

LINK_ACTIONS = ("create", "alter", "list", "describe", "pause", "resume", "delete")


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
    elif action == "alter":
        changes = _changes(args)
    # a chroot nobody registered under is a typo, not a cluster: refused, nothing created there
    client = zk_connect(ZkConnect.parse(args.zookeeper), timeout=10.0, create_chroot=False)
    try:
        store = MirrorLinkStore(client)
        if action == "create":
            store.create(link)
            print(f"created mirror link {link.name}: {link.source_zookeeper} include {link.include!r}"
                  + (f" exclude {link.exclude!r}" if link.exclude else ""))
        elif action == "alter":
            old, _ = store.get(args.name)  # UnknownLinkError first
            new = replace(old, **changes).validate()
            if new == old:
                print(f"mirror link {args.name}: unchanged")
            else:
                store.update(args.name, **changes)
                print(f"altered mirror link {args.name}: " + ", ".join(
                    f"{k} {v!r}" for k, v in changes.items() if getattr(old, k) != v))
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
    source_config = _source_config(args.source_config) if args.source_config else None
    zk_file = getattr(args, "source_zk_tls_config_file", None)
    zk_config = _zk_tls_file(zk_file) if zk_file else None
    return MirrorLink(args.name, args.source_zookeeper, args.include, args.exclude, source_config,
                      source_zookeeper_config=zk_config).validate()


def _changes(args: argparse.Namespace) -> dict[str, str | None]:
    """`alter`'s flags as the link's fields (``--exclude ''`` drops the exclusion). The link keeps its producer id,
    so the copy goes on where the offline log says it ends (a new ZooKeeper address of the same live cluster,
    a wider --include); a link to another live cluster is a new link."""
    changes: dict[str, str | None] = {}
    if args.source_zookeeper:
        changes["source_zookeeper"] = args.source_zookeeper
    if args.include:
        changes["include"] = args.include
    if args.exclude is not None:
        changes["exclude"] = args.exclude or None
    if args.source_config is not None:
        changes["source_config"] = _source_config(args.source_config) if args.source_config else None
    if getattr(args, "source_zk_tls_config_file", None):
        changes["source_zookeeper_config"] = _zk_tls_file(args.source_zk_tls_config_file)
    if not changes:
        raise UsageError("`ferry mirror link alter` needs one of --source-zookeeper, --include, --exclude, "
                         "--source-config, --source-zk-tls-config-file")
    return changes


def _source_config(flag: str) -> str:
    """The --source-config file's absolute path (stored in the link; every offline broker reads it there)."""
    path = Path(flag).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"--source-config {flag}: no such file")
    return str(path)


def _zk_tls_file(flag: str) -> str:
    """The live ZooKeeper's TLS settings file, read now: a bad file is one line here, not a link that fails on
    every broker."""
    path = Path(flag).resolve()
    ZkTlsConfig.from_file(str(path))
    return str(path)


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
