"""MetadataApis: Metadata (brokers, topics, leaders, ISRs as this broker's cache has them), creating a
requested topic first when auto.create.topics.enable is on and the client allows it.

An auto-created topic is answered LEADER_NOT_AVAILABLE (the client asks again once a leader is elected), or
INVALID_TOPIC_EXCEPTION when the registry refused its name.
"""

from __future__ import annotations

from ferry.broker.server.admin_apis import AdminApis
from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.request_context import RequestContext
from ferry.broker.server.request_result import Result
from ferry.wire.protocol import metadata
from ferry.wire.protocol.acl_types import AclOperation, ResourceType
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Reader
from ferry.zk.topic_name import validate_topic_name


class MetadataApis:
    """Metadata (key 3)."""

    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, admin: AdminApis,
                 authorizer: Authorizer | None = None) -> None:
        self._authz = authorizer if authorizer is not None else Authorizer()
        self._auto_create = config.auto_create_topics  # auto.create.topics.enable
        self._metadata = metadata_cache
        self._admin = admin  # creates the missing topics
        self._cluster_id = _cluster_id(config.zookeeper)

    # ------------------------------------------------------------------ Metadata
    def handle_metadata(self, request: RequestContext, r: Reader) -> Result:
        version = request.api_version
        req = metadata.parse_request(r, version)
        cache_topics = self._metadata.topics
        denied: frozenset[str] | set[str] = frozenset()
        names = req.topics
        by_id: dict[str, bytes] = {}
        if req.topic_ids:  # v12: topics named by id alone; an unknown id is answered UNKNOWN_TOPIC_ID
            ids = {info.topic_uuid: n for n, info in cache_topics.items()}
            by_id = {ids.get(i, "\0" + i.hex()): i for i in req.topic_ids}
            names = list(names or []) + list(by_id)
        if self._authz.enabled:
            unknown_ids = [n for n in by_id if n.startswith("\0")]  # nothing to authorize: UNKNOWN_TOPIC_ID
            names, denied = self._visible(request, None if names is None else [n for n in names if n not in unknown_ids])
            names = names + unknown_ids
        missing = [] if names is None else [t for t in names if t not in cache_topics and t not in denied
                                            and t not in by_id]
        if missing and self._auto_create and req.allow_auto_topic_creation:
            if self._authz.enabled:
                creatable = set(self._admin.creatable(request, missing))
                denied = set(denied) | (set(missing) - creatable)
                missing = [t for t in missing if t in creatable]
            if missing:
                return self._metadata_after_create(version, names, missing, denied, request.session.listener_name,
                                                   by_id)
        return self._metadata_body(version, names, request.session.listener_name, denied=denied, by_id=by_id)

    def _visible(self, request: RequestContext, names: list[str] | None) -> tuple[list[str], set[str]]:
        """Every topic asked for: the ones the principal may not Describe are answered TOPIC_AUTHORIZATION_FAILED;
        all topics asked for: only the describable ones are listed (the rest are hidden)."""
        authz = self._authz
        if names is None:
            return authz.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, sorted(self._metadata.topics)), set()
        allowed = set(authz.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names))
        denied = {n for n in names if n not in allowed}
        for n in denied:
            authz.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, n)  # logs the denial
        return names, denied

    async def _metadata_after_create(self, version: int, names: list[str] | None, missing: list[str],
                                     denied: frozenset[str] | set[str], listener: str,
                                     by_id: dict[str, bytes] | None = None) -> bytes:
        await self._admin.auto_create(missing)
        return self._metadata_body(version, names, listener, created=set(missing), denied=denied, by_id=by_id)

    def _metadata_body(self, version: int, names: list[str] | None, listener: str,
                       created: set[str] | frozenset = frozenset(),
                       denied: frozenset[str] | set[str] = frozenset(), by_id: dict[str, bytes] | None = None
                       ) -> bytes:
        """Brokers at their address on ``listener``, the one the client came in on (a broker without that
        listener is left out, as Kafka does)."""
        live = self._metadata.brokers
        topics = self._metadata.topics
        brokers = []
        for b in sorted(live.values(), key=lambda b: b.id):
            address = b.endpoint(listener)
            if address is not None:
                brokers.append(metadata.BrokerMetadata(b.id, address[0], address[1], b.datacenter or None))
        out: list[metadata.TopicMetadata] = []
        for name in (sorted(topics) if names is None else names):
            if name in denied:  # asked by id: its name is not told (v12)
                out.append(metadata.TopicMetadata(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name, [],
                                                  topic_id=(by_id or {}).get(name, metadata.NO_TOPIC_ID),
                                                  name_known=name not in (by_id or {})))
                continue
            info = topics.get(name)
            if info is None and name.startswith("\0"):  # an unknown topic id (metadata_apis' marker)
                out.append(metadata.TopicMetadata(ErrorCode.UNKNOWN_TOPIC_ID, "", [], topic_id=bytes.fromhex(name[1:]),
                                                  name_known=False))
                continue
            if info is None:
                code = ErrorCode.LEADER_NOT_AVAILABLE if name in created else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name in created and _invalid_topic_name(name):
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                out.append(metadata.TopicMetadata(code, name, []))
                continue
            parts = []
            states = self._metadata.states
            for p in sorted(info.partitions):
                replicas = list(info.replicas.get(p, (info.partitions[p],))) if info.replicas else [info.partitions[p]]
                offline = [b for b in replicas if b not in live]
                entry = states.get((name, p))
                if entry is not None and entry[0].leader in live:
                    st = entry[0]
                    parts.append(metadata.PartitionMetadata(0, p, st.leader, replicas, list(st.isr), offline,
                                                            st.leader_epoch))
                else:
                    epoch = entry[0].leader_epoch if entry is not None else 0
                    isr = list(entry[0].isr) if entry is not None else []
                    parts.append(metadata.PartitionMetadata(ErrorCode.LEADER_NOT_AVAILABLE, p, -1, replicas, isr,
                                                            offline, epoch))
            out.append(metadata.TopicMetadata(0, name, parts, topic_id=info.topic_uuid))
        return metadata.encode_response(version, brokers, self._cluster_id, self._metadata.controller_id(), out)


def _invalid_topic_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except Exception:
        return True
    return False


def _cluster_id(zk_connect: str) -> str:
    _, _, chroot = zk_connect.partition("/")
    return "ferry:/" + chroot if chroot else "ferry"
