"""`ferry configs`: describe and change topic and broker configs, spelled as Kafka's kafka-configs:

    ferry configs --bootstrap-server HOST:PORT --entity-type topics --entity-name events --describe
    ferry configs --bootstrap-server HOST:PORT --entity-type topics --entity-name events --alter \\
        --add-config retention.ms=86400000,segment.bytes=104857600 --delete-config min.insync.replicas

With `--bootstrap-server` through the brokers' DescribeConfigs / IncrementalAlterConfigs (ClusterAdmin); with
`--zookeeper` a topic's config is read and written in its znode directly (zk/topic_config.py), as kafka-configs'
old ZooKeeper mode did. Broker settings are static in ferry (the broker's command line and --override): they are
described, and a change is refused by the broker. Client quotas (`--entity-type clients|users`): quota_configs.py.
"""

from __future__ import annotations

import argparse
import json

from ferry.client.cluster_admin import ENTITY_TYPES
from ferry.client.tools import quota_configs
from ferry.client.tools.bootstrap_admin import open_admin
from ferry.client.tools.quota_configs import DEFAULT_NAME, EntityNameAction
from ferry.wire.log_config import LogConfig
from ferry.zk import cli_args as cli
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.errors import UnknownTopicError
from ferry.zk.topic_config import alter_topic_config
from ferry.zk.znodes import TopicInfo, topic_path

QUOTA_ENTITIES = ("clients", "users")
DESCRIPTION = ("Describe or change the configs of a topic, a broker, or the quotas of clients and users "
               "(kafka-configs' spelling). Topic configs are the per-topic overrides of the log settings "
               "(retention.ms, segment.bytes, min.insync.replicas, cleanup.policy, ...); broker settings are "
               "described only (they are static: the broker's command line); quotas (producer_byte_rate, "
               "consumer_byte_rate, request_percentage, controller_mutation_rate) per client id, user or both, "
               "with defaults, change live.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--describe", action="store_true", help="list the entity's configs")
    what.add_argument("--alter", action="store_true", help="change the entity's configs (--add-config, --delete-config)")
    parser.add_argument("--entity-type", choices=(*ENTITY_TYPES, *QUOTA_ENTITIES), metavar="TYPE", action="append",
                        help="topics, brokers, clients or users (quotas; users and clients together: a user's "
                             "client id)")
    parser.add_argument("--entity-name", metavar="NAME", action=EntityNameAction, dest="entity_names",
                        help="the topic's name, the broker's id, the client id or the user")
    parser.add_argument("--entity-default", nargs=0, action=EntityNameAction, dest="entity_names",
                        help="with clients or users: the default entity (brokers: not supported, static settings)")
    parser.add_argument("--topic", metavar="T", help="short for --entity-type topics --entity-name T")
    parser.add_argument("--broker", metavar="ID", help="short for --entity-type brokers --entity-name ID")
    parser.add_argument("--add-config", metavar="K=V[,K=V...]",
                        help="settings to set, comma-separated; a value holding commas goes in brackets: k=[a,b]")
    parser.add_argument("--delete-config", metavar="K[,K...]", help="settings to remove (back to the default)")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config, not only those set on the entity (as kafka-configs)")
    cli.add_zookeeper_argument(parser, "the cluster's ZooKeeper (topics only: configs written in the topic's "
                               "znode)", with_timeout=True)
    cli.add_bootstrap_argument(parser, "a broker of the cluster: DescribeConfigs / IncrementalAlterConfigs")
    cli.add_client_config_argument(parser, "the brokers (with --bootstrap-server)")
    cli.add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    cli.quiet_zookeeper_logs()
    types, names = args.entity_type or [], args.entity_names or []
    quotas = bool(types) and set(types) <= set(QUOTA_ENTITIES)
    entity_type, name = _entity(args) if not quotas else (types[0], "")
    add = _parse_add(args.add_config) if args.add_config else {}
    delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    if args.alter and not add and not delete:
        raise UsageError("--alter needs --add-config and/or --delete-config")
    if args.describe and (add or delete):
        raise UsageError("--add-config and --delete-config go with --alter")
    if set(add) & set(delete):
        raise UsageError(f"{sorted(set(add) & set(delete))[0]} is both added and deleted")
    cli.require_one_cluster(args)
    if quotas:
        return quota_configs.run(args, types, names, add, delete)
    if entity_type == "topics" and add:
        LogConfig.from_topic_config(add)  # a bad value is refused here, naming the setting, before any request
    if args.zookeeper:
        return _over_zookeeper(args, entity_type, name, add, delete)
    admin = open_admin(args)
    label = f"{entity_type[:-1]} {name}"
    if args.alter:
        admin.alter_configs(entity_type, name, add, delete)
        print(f"Completed updating config for {label}.")
        return 0
    dynamic = "DYNAMIC_TOPIC_CONFIG" if entity_type == "topics" else "DYNAMIC_BROKER_CONFIG"
    _print([e for e in admin.describe_configs(entity_type, name) if args.all or e["source"] == dynamic], label, args)
    return 0


def _print(rows: list[dict], label: str, args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'All' if args.all else 'Dynamic'} configs for {label} are:")
    for r in rows:
        value = "null" if r["value"] is None else r["value"]
        print(f"  {r['name']}={value} sensitive={str(r['sensitive']).lower()} "
              f"synonyms={{{r['source']}:{r['name']}={value}}}")


def _entity(args: argparse.Namespace) -> tuple[str, str]:
    """(entity type, name) from --entity-type/--entity-name or the --topic/--broker shortcuts."""
    given = [(t, n) for t, n in (("topics", args.topic), ("brokers", args.broker)) if n is not None]
    types, names = args.entity_type or [], args.entity_names or []
    if len(types) > 1 or len(names) > 1:
        raise UsageError("several --entity-type/--entity-name: only users with clients (quotas) go together")
    if types or names:
        given.append((types[0] if types else None, names[0] if names else None))
    if len(given) != 1:
        raise UsageError("name one entity: --entity-type TYPE --entity-name NAME (or --topic T / --broker ID)")
    entity_type, name = given[0]
    if entity_type is None:
        raise UsageError("--entity-name needs --entity-type topics|brokers|clients|users")
    if name is DEFAULT_NAME:
        raise UsageError("--entity-default: ferry's broker settings are static (the broker's command line); "
                         "describe a broker by id instead")
    if not name:
        raise UsageError(f"--entity-type {entity_type} needs --entity-name")
    if entity_type == "brokers" and not name.isdigit():
        raise UsageError(f"--entity-name {name!r}: a broker is named by its id (a number)")
    return entity_type, name


def _parse_add(text: str) -> dict[str, str]:
    """kafka-configs' ``k=v,k2=[a,b]``: commas inside brackets belong to the value (the brackets are dropped)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = cli.parse_key_values([i.strip() for i in items if i.strip()], "--add-config", "retention.ms=86400000")
    return {k: v[1:-1] if v.startswith("[") and v.endswith("]") else v for k, v in out.items()}


def _over_zookeeper(args: argparse.Namespace, entity_type: str, name: str, add: dict[str, str],
                    delete: list[str]) -> int:
    """A topic's config in its znode (the brokers follow through their topic watch)."""
    if entity_type != "topics":
        raise UsageError("broker configs are read from the brokers: give --bootstrap-server HOST:PORT")
    zk = zk_connect(args.zookeeper, timeout=args.timeout)
    try:
        if args.alter:
            def change(old: dict[str, str]) -> dict[str, str]:
                new = {k: v for k, v in old.items() if k not in delete}
                new.update(add)
                LogConfig.from_topic_config(new)
                return new
            alter_topic_config(zk, name, change)
            print(f"Completed updating config for topic {name}.")
            return 0
        if not zk.exists(topic_path(name)):
            raise UnknownTopicError(f"topic {name!r} does not exist")
        config = TopicInfo.decode(name, zk.get(topic_path(name))[0]).config
    finally:
        zk.stop()
        zk.close()
    if args.all:
        raise UsageError("--all needs --bootstrap-server (the defaults are the brokers')")
    rows = [{"name": k, "value": v, "source": "DYNAMIC_TOPIC_CONFIG", "sensitive": False, "read_only": False}
            for k, v in sorted(config.items())]
    _print(rows, f"topic {name}", args)
    return 0
