"""`ferry topics reassign --generate|--execute|--verify` and `ferry topics alter NAME --replication-factor R`.

kafka-reassign-partitions' modes with its JSON (client/tools/reassignment.py): --generate prints the
current and a proposed assignment, --execute writes the plan to ``/admin/reassign_partitions`` for the
controller (which adds the new replicas, waits until they are in the ISR, moves the leader if it is not
among the target replicas, writes the final replica list and deletes the request), --verify says per
partition whether that happened. `alter --replication-factor` is generate + execute for one topic, a
dry run unless --execute (as `ferry groups reset`). Like the rest of `ferry topics` this talks to
ZooKeeper only: the controller does the work, so the command returns as soon as the request is written.

Exit status: 0 done; 1 refused because a reassignment is in progress, or --verify found one unfinished;
2 bad input (one line on stderr, printed by topics_cmd.run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kazoo.exceptions import NodeExistsError, NoNodeError

from ferry.client.tools.reassignment import (
    Plan,
    ReassignmentPlanError,
    check_plan,
    current_plan,
    decode_plan,
    encode_plan,
    is_complete,
    parse_broker_list,
    propose,
)
from ferry.zk import ClusterRegistry, UnknownTopicError
from ferry.zk.cli_args import UsageError
from ferry.zk.znodes import REASSIGN_PARTITIONS_PATH, PartitionState, TopicInfo

DESCRIPTION = """\
Move partition replicas between brokers, or change a topic's replication factor, as
kafka-reassign-partitions does (the same JSON):

  --generate --topics T1,T2 --broker-list 1,2,3 [--replication-factor R]
      print the current assignment (keep it for a rollback) and a proposed one: the partitions placed
      over the given brokers as a new topic would be. With R different from the topic's replication
      factor each partition keeps its current replicas first (its preferred leader does not change)
      and gets the missing ones from that placement.
  --execute --reassignment-json-file FILE
      check the plan (known topics and partitions, distinct registered brokers) and hand it to the
      controller through /admin/reassign_partitions; refused while another reassignment is in progress.
      The controller copies the data to the new replicas first and switches only once they are in sync.
  --verify --reassignment-json-file FILE
      per partition: complete (the replica list is the target and every replica is in the ISR) or in
      progress; exit status 1 while any is unfinished.

JSON: {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2,3]}]}
"""


def add_parsers(actions: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """The `reassign` action (alter's --replication-factor is added by topics_cmd)."""
    reassign = actions.add_parser("reassign", help="move replicas or change the replication factor (Kafka's JSON)",
                                  description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = reassign.add_mutually_exclusive_group(required=True)
    mode.add_argument("--generate", action="store_true", help="print the current and a proposed assignment")
    mode.add_argument("--execute", action="store_true", help="start the reassignment in --reassignment-json-file")
    mode.add_argument("--verify", action="store_true", help="report the progress of --reassignment-json-file")
    reassign.add_argument("--topics", metavar="T1,T2", help="--generate: the topics to place (comma-separated)")
    reassign.add_argument("--topics-to-move-json-file", metavar="FILE",
                          help='--generate: the topics as Kafka names them, {"version":1,"topics":[{"topic":"t"}]}')
    reassign.add_argument("--broker-list", metavar="1,2,3", help="--generate: the brokers to place replicas on")
    reassign.add_argument("--replication-factor", type=int, metavar="R",
                          help="--generate: the new replication factor (default: each topic's own)")
    reassign.add_argument("--reassignment-json-file", metavar="FILE", help="--execute/--verify: the plan")
    return [reassign]


def reassign(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    if args.generate:
        return _generate(registry, args)
    if not args.reassignment_json_file:
        raise UsageError("--reassignment-json-file FILE is required with --execute and --verify")
    for flag in ("topics", "topics_to_move_json_file", "broker_list", "replication_factor"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} only goes with --generate")
    plan = decode_plan(_read(args.reassignment_json_file), args.reassignment_json_file)
    if args.execute:
        topics = registry.topics()
        check_plan(plan, topics, registry.brokers())
        return start_reassignment(registry, plan, topics)
    return _verify(registry, plan)


def _generate(registry: ClusterRegistry, args: argparse.Namespace) -> int:
    if args.reassignment_json_file:
        raise UsageError("--reassignment-json-file goes with --execute or --verify, not --generate")
    if (args.topics is None) == (args.topics_to_move_json_file is None):
        raise UsageError("--generate needs the topics: --topics T1,T2 or --topics-to-move-json-file FILE")
    if not args.broker_list:
        raise UsageError("--generate needs --broker-list 1,2,3")
    names = (_split_topics(args.topics) if args.topics is not None
             else _topics_to_move(_read(args.topics_to_move_json_file)))
    brokers = parse_broker_list(args.broker_list)
    unknown = sorted(set(brokers) - set(registry.brokers()))
    if unknown:
        raise ReassignmentPlanError(f"--broker-list names broker(s) {','.join(map(str, unknown))} that are not registered")
    infos = [_topic(registry, name) for name in names]
    proposed: Plan = {}
    for info in infos:
        proposed.update(propose(info, brokers, args.replication_factor))
    print("Current partition replica assignment")
    print(encode_plan(current_plan(infos)))
    print()
    print("Proposed partition reassignment configuration")
    print(encode_plan(proposed))
    return 0


def alter_replication_factor(registry: ClusterRegistry, args: argparse.Namespace, _config: dict[str, str]) -> int:
    """`ferry topics alter NAME --replication-factor R [--execute]`: generate over every registered broker,
    then (with --execute) execute."""
    info = _topic(registry, args.name)
    plan = propose(info, sorted(registry.brokers()), args.replication_factor)
    current = current_plan([info])
    if plan == current:
        print(f"Topic {info.name} has replication factor {args.replication_factor} already; nothing to do.")
        return 0
    print(f"Topic {info.name}: replication factor {len(info.replicas[0])} -> {args.replication_factor}")
    print("Proposed partition reassignment configuration")
    print(encode_plan(plan))
    if not args.execute:
        print("Dry run: nothing changed. Add --execute to start it (the controller copies the data to the new "
              "replicas, then switches).")
        return 0
    print()
    return start_reassignment(registry, plan, registry.topics())


def start_reassignment(registry: ClusterRegistry, plan: Plan, topics: dict[str, TopicInfo]) -> int:
    """Write the plan to /admin/reassign_partitions unless a reassignment is in progress (then exit 1).

    ``create`` rather than ``set``: two operators racing cannot overwrite each other's request."""
    client = registry.client
    pending = pending_reassignment(registry)
    if pending is not None:
        return _in_progress(pending)
    print("Current partition replica assignment")
    print(encode_plan({tp: topics[tp[0]].replicas[tp[1]] for tp in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    client.ensure_path(REASSIGN_PARTITIONS_PATH.rsplit("/", 1)[0])
    try:
        client.create(REASSIGN_PARTITIONS_PATH, encode_plan(plan).encode())
    except NodeExistsError:
        return _in_progress(pending_reassignment(registry) or {})
    print("Successfully started partition reassignment for " + ",".join(f"{t}-{p}" for t, p in sorted(plan)))
    return 0


def pending_reassignment(registry: ClusterRegistry) -> Plan | None:
    """The request the controller has not finished, or None. An unreadable one counts as pending (it
    still blocks a new request) and shows as empty."""
    try:
        data, _ = registry.client.get(REASSIGN_PARTITIONS_PATH)
    except NoNodeError:
        return None
    try:
        return decode_plan((data or b"").decode("utf-8", "replace"), REASSIGN_PARTITIONS_PATH)
    except ReassignmentPlanError:
        return {}


def _in_progress(pending: Plan) -> int:
    names = ",".join(f"{t}-{p}" for t, p in sorted(pending)) or "unreadable request"
    print(f"ferry topics reassign: refused: a partition reassignment is in progress ({REASSIGN_PARTITIONS_PATH}: "
          f"{names}); wait until the controller has finished it (--verify) and try again", file=sys.stderr)
    return 1


def _verify(registry: ClusterRegistry, plan: Plan) -> int:
    pending = pending_reassignment(registry) or {}
    topics = registry.topics()
    states: dict[str, dict[int, PartitionState]] = {}
    unfinished = 0
    print("Status of partition reassignment:")
    for (topic, p), target in sorted(plan.items()):
        info = topics.get(topic)
        if info is not None and topic not in states:
            try:
                states[topic] = registry.partition_states(topic)
            except UnknownTopicError:
                info = None
        now = info.replicas.get(p) if info is not None else None
        state = states.get(topic, {}).get(p)
        name = f"{topic}-{p}"
        if is_complete(target, now, state):
            print(f"Reassignment of partition {name} is complete.")
            continue
        unfinished += 1
        isr = ",".join(map(str, state.isr)) if state is not None else "-"
        replicas = ",".join(map(str, now)) if now is not None else "none (no such partition)"
        how = "is still in progress" if (topic, p) in pending or tuple(now or ()) == target else \
            "is not in progress (not started, or replaced by another plan)"
        print(f"Reassignment of partition {name} {how}: replicas {replicas}, isr {isr}, "
              f"target {','.join(map(str, target))}.")
    return 1 if unfinished else 0


def _topic(registry: ClusterRegistry, name: str) -> TopicInfo:
    info = registry.topic(name)
    if info is None:
        raise UnknownTopicError(f"topic {name!r} does not exist")
    return info


def _split_topics(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--topics names no topic")
    return list(dict.fromkeys(names))


def _topics_to_move(text: str) -> list[str]:
    """Kafka's --topics-to-move-json-file: {"version":1,"topics":[{"topic":"t"}]}."""
    try:
        doc = json.loads(text)
        names = [str(item["topic"]) for item in doc["topics"]]
    except (ValueError, KeyError, TypeError):
        raise ReassignmentPlanError('--topics-to-move-json-file must look like {"version":1,"topics":[{"topic":"t"}]}') from None
    if not names:
        raise ReassignmentPlanError("--topics-to-move-json-file names no topic")
    return list(dict.fromkeys(names))


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
