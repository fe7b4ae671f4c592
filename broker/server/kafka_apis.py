"""KafkaApis: the router of requests. It reads a frame's header, checks the API key and version against what the
broker advertises, and calls the one handler registered for the key in ``_handlers`` (the place a new Kafka API is
added). The handlers are one object per API family, each owning its collaborators.

`handle(frame)` runs synchronously on the event loop up to the point where a request would wait (an fsync
for acks=-1, a parked fetch, a ZooKeeper call): appends therefore happen in request order. It returns the
correlation id and a Result (request_result.py). Bad requests raise CloseConnection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from functools import partial

from ferry.broker.server.acl_apis import AclApis
from ferry.broker.server.admin_apis import AdminApis
from ferry.broker.server.authorizer import Authorizer
from ferry.broker.server.broker_config import BrokerConfig
from ferry.broker.server.client_quota_apis import ClientQuotaApis
from ferry.broker.server.client_quotas import ClientQuotas
from ferry.broker.server.config_apis import ConfigApis
from ferry.broker.server.controller_mutations import ControllerMutations
from ferry.broker.server.election_apis import ElectionApis
from ferry.broker.server.fetch_apis import FetchApis
from ferry.broker.server.fetch_purgatory import FetchPurgatory
from ferry.broker.server.group_apis import GroupApis
from ferry.broker.server.group_coordinator import GroupCoordinator
from ferry.broker.server.log_flusher import LogFlusher
from ferry.broker.server.metadata_apis import MetadataApis
from ferry.broker.server.metadata_cache import MetadataCache
from ferry.broker.server.produce_apis import ProduceApis
from ferry.broker.server.producer_id_manager import ProducerIdManager
from ferry.broker.server.replica_manager import ReplicaManager
from ferry.broker.server.replication_apis import ReplicationApis
from ferry.broker.server.request_context import ANONYMOUS, RequestContext, Session
from ferry.broker.server.request_metrics import FETCH, PRODUCE, RequestMetrics, count_error
from ferry.broker.server.request_result import CloseConnection, Handler, Result
from ferry.broker.server.topic_admin_apis import TopicAdminApis
from ferry.broker.server.transaction_admin_apis import TransactionAdminApis
from ferry.broker.server.transaction_apis import TransactionApis
from ferry.broker.server.transaction_coordinator import TransactionCoordinator
from ferry.wire.protocol import api_versions
from ferry.wire.protocol.api_keys import ADVERTISED, ApiKey, is_advertised
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.header import peek_header, read_request_header
from ferry.wire.protocol.primitives import ERROR_SINK, ProtocolError, Reader
from ferry.zk.cluster_registry import ClusterRegistry

_LOCAL = Session(ANONYMOUS, "127.0.0.1")
_PLAIN = (bytes, bytearray, list, type(None))  # answers encoded already (no awaiting left)


async def _counting(pending: Awaitable, sink: Callable[[int], None]) -> object:
    """A delayed answer whose encoding counts its error codes for its API (the awaiting task's own context)."""
    token = ERROR_SINK.set(sink)
    try:
        return await pending
    finally:
        ERROR_SINK.reset(token)


class KafkaApis:
    """Routes each request to its handler by API key; answers ApiVersions itself (it describes the routing)."""

    def __init__(self, config: BrokerConfig, metadata_cache: MetadataCache, replicas: ReplicaManager,
                 registry: ClusterRegistry, producer_ids: ProducerIdManager, purgatory: FetchPurgatory,
                 flusher: LogFlusher, executor: Executor | None = None,
                 group_coordinator: GroupCoordinator | None = None,
                 transaction_coordinator: TransactionCoordinator | None = None,
                 authorizer: Authorizer | None = None) -> None:
        self.request_metrics = RequestMetrics()  # counted by Connection.dispatch, read at scrape time
        # ACLs (docs/acls.md): every handler family asks this one authorizer; without one it allows all at once
        authz = self.authorizer = authorizer if authorizer is not None else Authorizer()
        self.produce = ProduceApis(replicas, flusher, authz)  # the connection takes the common Produce here directly
        self.request_metrics.produce_bytes = self.produce.topic_bytes
        self.request_metrics.produce_messages = self.produce.topic_messages
        fetch = FetchApis(replicas, purgatory, config.fetch_wait_max_ms, self.request_metrics.fetch_bytes, authz)
        fetch.error_codes = self.produce.error_codes  # one count of error codes per API for the metrics
        self.request_metrics.error_codes = self.produce.error_codes
        admin = AdminApis(config, metadata_cache, registry, executor, authz)
        meta = MetadataApis(config, metadata_cache, admin, authz)
        topics = TopicAdminApis(config, metadata_cache, registry, replicas, executor, authz)
        configs = ConfigApis(config, registry, executor, authz)
        elections = ElectionApis(metadata_cache, registry, executor, authz)
        replication = ReplicationApis(replicas, authz)
        txn = TransactionApis(transaction_coordinator, group_coordinator, producer_ids, metadata_cache, registry,
                              executor, authz)
        groups = GroupApis(group_coordinator, txn, authz)
        txn_admin = TransactionAdminApis(transaction_coordinator, replicas, executor, authz)
        acls = AclApis(authz, lambda: registry.client, executor)
        # docs/quotas.md: filled by the broker's QuotaConfigCache, read per connection
        mutations = ControllerMutations(metadata_cache, config.num_partitions)
        self.quotas = ClientQuotas(config.quota_window_num, config.quota_window_size_seconds, mutations.count)
        quotas = ClientQuotaApis(lambda: registry.client, executor, authz)
        self._handlers: dict[int, Handler] = {
            ApiKey.PRODUCE: self.produce.handle_produce,
            ApiKey.FETCH: fetch.handle_fetch,
            ApiKey.LIST_OFFSETS: fetch.handle_list_offsets,
            ApiKey.METADATA: meta.handle_metadata,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: replication.handle_offset_for_leader_epoch,
            # admin
            ApiKey.CREATE_TOPICS: admin.handle_create_topics,
            ApiKey.DELETE_TOPICS: topics.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
            ApiKey.DELETE_RECORDS: topics.handle_delete_records,
            ApiKey.ELECT_LEADERS: elections.handle_elect_leaders,
            ApiKey.DESCRIBE_LOG_DIRS: topics.handle_describe_log_dirs,
            ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: configs.handle_incremental_alter_configs,
            ApiKey.ALTER_CONFIGS: configs.handle_alter_configs,
            # groups
            ApiKey.FIND_COORDINATOR: groups.handle_find_coordinator,
            ApiKey.JOIN_GROUP: groups.handle_join_group,
            ApiKey.SYNC_GROUP: groups.handle_sync_group,
            ApiKey.HEARTBEAT: groups.handle_heartbeat,
            ApiKey.LEAVE_GROUP: groups.handle_leave_group,
            ApiKey.OFFSET_COMMIT: groups.handle_offset_commit,
            ApiKey.OFFSET_FETCH: groups.handle_offset_fetch,
            ApiKey.LIST_GROUPS: groups.handle_list_groups,
            ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
            ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
            ApiKey.OFFSET_DELETE: groups.handle_offset_delete,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: groups.handle_consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: groups.handle_consumer_group_describe,
            # producer ids and transactions
            ApiKey.INIT_PRODUCER_ID: txn.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: txn.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: txn.handle_add_offsets_to_txn,
            ApiKey.END_TXN: txn.handle_end_txn,
            ApiKey.WRITE_TXN_MARKERS: txn.handle_write_txn_markers,
            ApiKey.TXN_OFFSET_COMMIT: txn.handle_txn_offset_commit,
            ApiKey.LIST_TRANSACTIONS: txn_admin.handle_list_transactions,
            ApiKey.DESCRIBE_TRANSACTIONS: txn_admin.handle_describe_transactions,
            ApiKey.DESCRIBE_PRODUCERS: txn_admin.handle_describe_producers,
            # ACLs
            ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
            ApiKey.CREATE_ACLS: acls.handle_create_acls,
            ApiKey.DELETE_ACLS: acls.handle_delete_acls,
            # client quotas
            ApiKey.DESCRIBE_CLIENT_QUOTAS: quotas.handle_describe_client_quotas,
            ApiKey.ALTER_CLIENT_QUOTAS: quotas.handle_alter_client_quotas,
        }
        # ErrorsPerSec of every API: the error codes its answers' encoders write (Writer.error_code) are counted
        # here; Produce and Fetch count theirs per partition in their handlers (the hot paths' own encoders)
        self._error_sinks: dict[int, Callable[[int], None]] = {
            key: partial(count_error, self.request_metrics.error_codes, key)
            for key in (*self._handlers, ApiKey.API_VERSIONS) if key not in (PRODUCE, FETCH)}

    def handle(self, frame: bytes | bytearray, fast: bool = True, session: Session | None = None
               ) -> tuple[int, Result]:
        """(correlation id, result); ``fast=False``: the caller tried the produce fast path already. ``session``:
        the connection's identity (an anonymous loopback one for callers without a connection)."""
        try:
            api_key, version, correlation_id = peek_header(frame)
        except ProtocolError as e:
            raise CloseConnection(str(e)) from None
        if fast and api_key == ApiKey.PRODUCE:
            body = self.produce.handle_fast(frame, version)
            if body is not None:
                return correlation_id, body
        if api_key == ApiKey.API_VERSIONS and version > ADVERTISED[ApiKey.API_VERSIONS][1]:
            # A newer client: answer in v0 with the ranges we speak (the body of a v3+ request is flexible).
            count_error(self.request_metrics.error_codes, api_key, ErrorCode.UNSUPPORTED_VERSION)
            return correlation_id, api_versions.encode_response(0, ErrorCode.UNSUPPORTED_VERSION, ADVERTISED)
        handler = self._handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown api key {api_key} (version {version}, correlation id {correlation_id})")
        if not is_advertised(api_key, version):
            lo, hi = ADVERTISED[api_key]
            raise CloseConnection(f"unsupported version {version} of {ApiKey(api_key).name} (supported {lo}-{hi})")
        sink = self._error_sinks.get(api_key)
        token = ERROR_SINK.set(sink) if sink is not None else None
        try:
            header, reader = read_request_header(frame)
            result = handler(RequestContext(header, session or _LOCAL), reader)
        except ProtocolError as e:
            raise CloseConnection(f"malformed {ApiKey(api_key).name} v{version} request: {e}") from None
        finally:
            if token is not None:
                ERROR_SINK.reset(token)
        if sink is not None and type(result) not in _PLAIN:
            result = _counting(result, sink)
        return correlation_id, result

    def handle_api_versions(self, request: RequestContext, r: Reader) -> Result:
        return api_versions.encode_response(request.api_version, ErrorCode.NONE, ADVERTISED)
