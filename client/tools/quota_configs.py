"""`ferry configs --entity-type clients|users`: client quotas, spelled as kafka-configs spells them:

    ferry configs --bootstrap-server B --alter --entity-type clients --entity-name app \\
        --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152
    ferry configs --bootstrap-server B --alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-default --add-config request_percentage=50
    ferry configs --bootstrap-server B --describe --entity-type clients [--entity-name app | --entity-default]

With --bootstrap-server through the brokers' DescribeClientQuotas / AlterClientQuotas; with --zookeeper in the
znodes directly (zk/client_quotas.py), as kafka-configs' old ZooKeeper mode did. Either way every broker applies
a change live through its watch.
"""

from __future__ import annotations

import argparse
import json
import math

from ferry.wire.broker_connection import BrokerConnection
from ferry.wire.client_config import ClientConfig
from ferry.wire.connection_errors import ClientError
from ferry.wire.protocol import alter_client_quotas, describe_client_quotas
from ferry.wire.protocol.describe_client_quotas import Entity
from ferry.wire.protocol.errors import error_name
from ferry.zk import cli_args as cli
from ferry.zk import client_quotas as store
from ferry.zk import connect as zk_connect
from ferry.zk.cli_args import UsageError
from ferry.zk.client_quotas import CLIENT_ID, DEFAULT, QUOTA_KEYS, USER, QuotaEntity

TYPE_OF = {"users": USER, "clients": CLIENT_ID}
DEFAULT_NAME = object()  # --entity-default's place among the --entity-name values


class EntityNameAction(argparse.Action):
    """--entity-name and --entity-default in the order given: kafka-configs pairs them with --entity-type."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        names = list(getattr(namespace, self.dest, None) or [])
        names.append(DEFAULT_NAME if values is None or option_string == "--entity-default" else values)
        setattr(namespace, self.dest, names)


def quota_entity(types: list[str], names: list) -> tuple[Entity, bool]:
    """(the protocol's entity, whether it is one entity or all of its types: a describe without names)."""
    if len(types) != len(set(types)) or not set(types) <= set(TYPE_OF):
        raise UsageError("quotas: --entity-type users and/or --entity-type clients, each once")
    if names and len(names) != len(types):
        raise UsageError("give each --entity-type its --entity-name NAME or --entity-default, in the same order")
    order = sorted(range(len(types)), key=lambda i: types[i] != "users")  # user first, as Kafka prints it
    if not names:
        return [(TYPE_OF[types[i]], None) for i in order], False
    for n in names:
        if n is not DEFAULT_NAME and not n:
            raise UsageError("--entity-name cannot be empty (use --entity-default for the default entity)")
    return [(TYPE_OF[types[i]], None if names[i] is DEFAULT_NAME else names[i]) for i in order], True


def quota_values(add: dict[str, str], delete: list[str]) -> dict[str, float]:
    """--add-config as quota values; UsageError for a key that is not a quota or a value that is not a rate."""
    for k in [*add, *delete]:
        if k not in QUOTA_KEYS:
            raise UsageError(f"{k!r} is not a client quota (quotas: {', '.join(QUOTA_KEYS)})")
    out = {}
    for k, v in add.items():
        try:
            out[k] = float(v)
        except ValueError:
            raise UsageError(f"{k}={v!r}: a quota is a number") from None
        if not (out[k] > 0 and math.isfinite(out[k])):
            raise UsageError(f"{k}={v}: a quota must be a positive number")
    return out


def describe_text(entity: Entity) -> str:
    """Kafka's words for an entity: "user-principal 'alice', the default client-id"."""
    words = {USER: "user-principal", CLIENT_ID: "client-id"}
    return ", ".join(f"the default {words[t]}" if n is None else f"{words[t]} '{n}'" for t, n in entity)


def run(args: argparse.Namespace, types: list[str], names: list, add: dict[str, str], delete: list[str]) -> int:
    entity, named = quota_entity(types, names)
    values = quota_values(add, delete)
    if args.alter and not named:
        raise UsageError("--alter needs --entity-name NAME or --entity-default for each --entity-type")
    quotas = ZooKeeperQuotas(args.zookeeper, args.timeout) if args.zookeeper else \
        BrokerQuotas(args.bootstrap, args.timeout, cli.client_config(args))
    if args.alter:
        quotas.alter(entity, values, delete)
        print(f"Completed updating config for {describe_text(entity)}.")
        return 0
    found = quotas.describe(entity, named)
    if args.json:
        print(json.dumps([{"entity": {t: n for t, n in e}, "quotas": q} for e, q in found], indent=2))
        return 0
    for e, q in found:
        text = ", ".join(f"{k}={v!r}" for k, v in sorted(q.items()))
        print(f"Quota configs for {describe_text(e)} are {text}")
    return 0


def _matches(entity: Entity, wanted: Entity, named: bool) -> bool:
    if [t for t, _ in entity] != [t for t, _ in wanted]:
        return False
    return not named or entity == wanted


class BrokerQuotas:
    """A broker's DescribeClientQuotas / AlterClientQuotas."""

    def __init__(self, bootstrap: str, timeout: float, config: ClientConfig) -> None:
        host, sep, port = bootstrap.split(",")[0].strip().rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--bootstrap-server {bootstrap!r}: expected HOST:PORT")
        self._conn = BrokerConnection(-1, host.strip("[]"), int(port), client_id="ferry-configs",
                                      timeout_s=timeout, connect_timeout_s=timeout, security=config.security())

    def _request(self, encoded: tuple) -> memoryview:
        try:
            return self._conn.request(*encoded)
        finally:
            self._conn.close()

    def alter(self, entity: Entity, values: dict[str, float], delete: list[str]) -> None:
        ops = [alter_client_quotas.QuotaOp(k, v) for k, v in values.items()]
        ops += [alter_client_quotas.QuotaOp(k, 0.0, remove=True) for k in delete]
        encoded = alter_client_quotas.encode_request([alter_client_quotas.AlterEntry(entity, ops)])
        for code, message, _entity in alter_client_quotas.parse_response(self._request(encoded)):
            if code:
                raise ClientError(f"the broker refused: {error_name(code)}" + (f" ({message})" if message else ""))

    def describe(self, entity: Entity, named: bool) -> list[tuple[Entity, dict[str, float]]]:
        components = [describe_client_quotas.Component(t, describe_client_quotas.MATCH_EXACT, n) if n is not None
                      else describe_client_quotas.Component(t, describe_client_quotas.MATCH_DEFAULT)
                      for t, n in entity] if named else []
        code, message, found = describe_client_quotas.parse_response(
            self._request(describe_client_quotas.encode_request(components, strict=named)))
        if code:
            raise ClientError(f"the broker answered {error_name(code)}" + (f": {message}" if message else ""))
        return [(e, q) for e, q in found if _matches(e, entity, named)]


class ZooKeeperQuotas:
    """The quota znodes themselves (kafka-configs' old --zookeeper mode)."""

    def __init__(self, zookeeper: str, timeout: float) -> None:
        self._zookeeper, self._timeout = zookeeper, timeout

    def _stored(self, entity: Entity) -> QuotaEntity:
        names = {t: DEFAULT if n is None else n for t, n in entity}
        return QuotaEntity(names.get(USER), names.get(CLIENT_ID))

    def alter(self, entity: Entity, values: dict[str, float], delete: list[str]) -> None:
        zk = zk_connect(self._zookeeper, timeout=self._timeout)
        try:
            store.alter(zk, self._stored(entity), values, delete)
        finally:
            zk.stop()
            zk.close()

    def describe(self, entity: Entity, named: bool) -> list[tuple[Entity, dict[str, float]]]:
        zk = zk_connect(self._zookeeper, timeout=self._timeout, create_chroot=False)
        try:
            stored = store.read_all(zk)
        finally:
            zk.stop()
            zk.close()
        return [(e.components(), q) for e, q in sorted(stored.items(), key=lambda kv: kv[0].path()) if _matches(e.components(), entity, named)]
