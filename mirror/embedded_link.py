"""LinkRunner: one mirror link as one offline broker runs it.

It holds the link's view of the live cluster (its ZooKeeper: topics, partition leaders, brokers), keeps the
offline topics a superset of the live ones the link selects (the standalone mirror's TopicSync: every offline
broker races to create them, "already exists" is success), and runs a PartitionCopier for each offline
partition of a selected topic that this broker leads, while the link is running. Leadership is the offline
cluster's: a copier lives exactly as long as its leader epoch here, and the next leader (here or elsewhere)
starts its own from where the offline log says the copy ends.

The link's --source-config (librdkafka properties, read on each broker when the link starts there) says how the
copiers reach the live brokers: the listener of its security.protocol, TLS and SASL on every live connection.
A file missing or bad here, or settings the live cluster refuses, make the link "failed: <reason>" on this broker
(link_progress.write_failure): the start is retried with back-off (reading the file again), the broker goes on.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace

from ferry.broker.server.broker_plugin import BrokerServices
from ferry.client.topic_selection import TopicFilter
from ferry.mirror.audit_sender import AuditEventSender
from ferry.mirror.copy_lag import CopyRates, lag_messages, lag_seconds
from ferry.mirror.embedded_audit import APPLICATION, LinkAuditor
from ferry.mirror.embedded_copier import LinkSettingsError, PartitionCopier, copy_position
from ferry.mirror.link_overlap import LinkOverlap, live_cluster_identity, overlap_reason
from ferry.mirror.link_progress import PAUSED, clear_failure, remove_progress, write_failure, write_progress
from ferry.mirror.schema_sync import SchemaSync
from ferry.mirror.topic_sync import TopicSync
from ferry.wire.client_config import ClientConfig, ClientConfigError
from ferry.wire.sasl_login import PLAINTEXT, ClientSecurity
from ferry.zk.cluster_registry import ClusterRegistry
from ferry.zk.mirror_links import RUNNING, MirrorLink, MirrorLinkStore
from ferry.zk.topic_name import AUDIT_TOPIC
from ferry.zk.zk_tls import ZkTlsConfig, ZkTlsConfigError

log = logging.getLogger("ferry.mirror.embedded")

REPORT_INTERVAL_S = 2.0
TopicPartition = tuple[str, int]


class LinkRunner:
    def __init__(self, link: MirrorLink, services: BrokerServices) -> None:
        self.link = link
        self.services = services
        self.filter = TopicFilter(link.include, link.exclude)
        self.live: ClusterRegistry | None = None
        self.topic_sync: TopicSync | None = None
        self.copiers: dict[TopicPartition, PartitionCopier] = {}
        self.auditor: LinkAuditor | None = None
        self.schema_sync: SchemaSync | None = None
        self._reported_at = 0.0
        self._paused_reported: set[TopicPartition] = set()
        self.rates = CopyRates()
        self.lag_s: dict[TopicPartition, float] = {}  # at the last report (read by /metrics)
        self.client_config = ClientConfig.plaintext()
        self.security: ClientSecurity = PLAINTEXT
        self._settings_stamp: tuple[int, int] | None = None  # the --source-config file as read: (mtime ns, size)
        self._failure: str | None = ""  # the failure this broker last reported for the link ("": not known yet)
        self.source_cluster: str | None = None  # the live cluster's identity, read at start (link_overlap.py)
        self.overlap: str | None = None  # why a selected topic is left to another link of the same live cluster
        self._overlap_logged: str | None = None

    def same_source(self, link: MirrorLink) -> bool:
        """Whether ``link`` is still what this runner copies (else it is stopped and started anew)."""
        old = self.link
        same_id = old.producer_id == link.producer_id or link.producer_id < 0 or old.producer_id < 0
        return same_id and (old.source_zookeeper, old.include, old.exclude, old.source_config,
                            old.source_zookeeper_config) == \
            (link.source_zookeeper, link.include, link.exclude, link.source_config, link.source_zookeeper_config)

    def settings_changed(self) -> bool:
        """Whether the --source-config file changed since this runner read it (a fixed password, a renewed
        certificate): the host then starts the link anew, reading it again. Blocking (a stat)."""
        return self.link.source_config is not None and self._settings_stamp is not None and \
            _stamp(self.link.source_config) != self._settings_stamp

    async def _blocking(self, fn, *args):  # noqa: ANN001, ANN202 - run_in_executor's own shape
        return await self.services.loop.run_in_executor(self.services.executor, fn, *args)

    async def start(self, attempt: int = 1) -> bool:
        """Connect to the live ZooKeeper, make sure the link has its producer id, start the topic sync. False:
        not now (the live ZooKeeper does not answer): the host tries again at its next pass (``attempt``: how
        many times in a row it tried, for a log line now and then rather than one a pass)."""
        link = self.link
        if link.producer_id < 0:
            pid = await self.services.producer_ids.next_id()
            self.link = link = await self._blocking(
                MirrorLinkStore(self.services.registry.client).set_producer_id_if_unset, link.name, pid)
        if link.source_config:
            try:
                self._settings_stamp = await self._blocking(_stamp, link.source_config)
                self.client_config, self.security = await self._blocking(_load_settings, link.source_config)
            except ClientConfigError as e:  # one line naming the file, never a secret
                if attempt in (1, 10) or attempt % 100 == 0:
                    log.warning("mirror link %s: failed: %s (%d times in a row; retrying)", link.name, e, attempt)
                await self._report_failure(str(e))
                return False
        try:  # the live ZooKeeper's TLS settings: the link's own file, else this broker's
            zk_tls = await self._blocking(ZkTlsConfig.from_file, link.source_zookeeper_config) \
                if link.source_zookeeper_config else None
        except ZkTlsConfigError as e:
            if attempt in (1, 10) or attempt % 100 == 0:
                log.warning("mirror link %s: failed: %s (%d times in a row; retrying)", link.name, e, attempt)
            await self._report_failure(str(e))
            return False
        live = ClusterRegistry(link.source_zookeeper, timeout=10.0, create=False, tls=zk_tls)
        try:
            await self._blocking(live.start)
        except Exception as e:
            if attempt in (1, 10) or attempt % 100 == 0:
                log.warning("mirror link %s: the live ZooKeeper %s does not answer (%s; %d times in a row); "
                            "retrying", link.name, link.source_zookeeper,
                            " ".join((str(e) or type(e).__name__).split()), attempt)
            await self._blocking(live.stop)
            return False
        self.live = live
        try:
            await self._learn_source_cluster()
            await self._start_syncs(link)
        except Exception as e:  # e.g. the live ZooKeeper refuses a write of the schema copy's watch path
            log.warning("mirror link %s: cannot start (%s); retrying", link.name,
                        " ".join((str(e) or type(e).__name__).split()))
            await self.stop()
            return False
        log.info("mirror link %s: running from %s (include %r%s), producer id %d", link.name,
                 link.source_zookeeper, link.include, f", exclude {link.exclude!r}" if link.exclude else "",
                 link.producer_id)
        return True

    async def _learn_source_cluster(self) -> None:
        """Read the live cluster's identity and store it in the link if it differs (every broker then knows which
        links pull from one cluster, even one that cannot reach it)."""
        live = self.live
        assert live is not None
        self.source_cluster = await self._blocking(live_cluster_identity, live.client)
        if self.link.source_cluster != self.source_cluster:
            store, name, cluster = MirrorLinkStore(self.services.registry.client), self.link.name, self.source_cluster
            self.link = await self._blocking(lambda: store.update(name, source_cluster=cluster))

    async def _start_syncs(self, link: MirrorLink) -> None:
        """What runs beside the copiers: the topic and schema copies, the audit publisher."""
        live, registry = self.live, self.services.registry
        assert live is not None
        # the offline `_audit` too: the mirror tier's counts go there
        self.topic_sync = TopicSync(live, registry, self.filter.matches, always=(AUDIT_TOPIC,))
        await self._blocking(self.topic_sync.start)
        # mirrored Avro payloads keep their live schema ids: the offline registry must know them (ids preserved)
        self.schema_sync = await self._blocking(SchemaSync(live, registry).start)
        # the offline brokers' inter-broker listener (their registration), as the broker's own principal
        sender = AuditEventSender(lambda: ",".join(b.address for b in registry.brokers().values()), APPLICATION,
                                  self.services.config.datacenter, client_config=self.services.own_client)
        self.auditor = LinkAuditor(link.name, link.producer_id, lambda: registry.client, sender,
                                   self.services.config.datacenter).start()

    async def leader_of(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        """(node, host, port) of the live leader of ``topic``-``partition``, read from the live ZooKeeper."""
        live = self.live
        if live is None:
            return None

        def lookup() -> tuple[int, str, int] | None:
            state = live.partition_states(topic).get(partition)
            if state is None or state.leader < 0:
                return None
            broker = live.broker(state.leader)
            if broker is None:
                return None
            address = broker.address_for(protocol)
            if address is None:
                raise LinkSettingsError(f"live broker {state.leader} has no {protocol} listener "
                                        f"(security.protocol of {self.link.source_config})")
            return (state.leader, *address)

        protocol = self.client_config.security_protocol

        return await self._blocking(lookup)

    async def reconcile(self, link: MirrorLink, overlap: LinkOverlap | None = None) -> None:
        """Run a copier for each selected partition led here while the link runs; stop the others. A topic that
        ``overlap`` gives to another link of the same live cluster is left to it (and the link says so)."""
        self.link = link = replace(link, source_cluster=link.source_cluster or self.source_cluster)
        replicas = self.services.replicas
        running = link.state == RUNNING
        led, left = {}, {}
        for tp, part in list(replicas.partitions.items()):
            if part.is_leader and not part.log.offline and self.filter.matches(tp[0]):
                other = overlap.copier_of(link, tp[0]) if overlap is not None else None
                if other is None:
                    led[tp] = part
                else:
                    left[tp[0]] = other
        self.overlap = overlap_reason(*min(left.items())) if left else None
        if self.overlap and self.overlap != self._overlap_logged:
            log.error("mirror link %s: %s (one link per live cluster): not copied by this link", link.name,
                      self.overlap)
        self._overlap_logged = self.overlap
        for tp, copier in list(self.copiers.items()):
            if not running or tp not in led or not copier.leads or copier.done:
                del self.copiers[tp]
                await copier.stop()
        if running:
            self._paused_reported.clear()
            for tp, part in led.items():
                if tp not in self.copiers:
                    self.copiers[tp] = PartitionCopier(
                        link.name, link.producer_id, part, replicas, self.leader_of, self._blocking,
                        f"ferry-embedded-mirror-{self.services.config.broker_id}", self.security,
                        flusher=self.services.flusher).start()
        if self.auditor is not None:
            self.auditor.partitions = {tp: c.part for tp, c in self.copiers.items()}
            self.auditor.starts = {tp: c.fresh_from for tp, c in self.copiers.items() if c.fresh_from is not None}
        await self._report(led, running)

    async def _report(self, led: dict, running: bool) -> None:
        now = time.monotonic()
        if now - self._reported_at < REPORT_INTERVAL_S:
            return
        self._reported_at = now
        broker_id = self.services.config.broker_id
        await self._report_failure(next((c.link_error for c in self.copiers.values() if c.link_error), self.overlap))
        reports = await self._blocking(self._copier_reports, broker_id)
        if not running:
            for tp, part in led.items():
                position = await self._blocking(copy_position, part.log, self.link.producer_id)
                reports.append({"link": self.link.name, "topic": tp[0], "partition": tp[1], "broker": broker_id,
                                "leader_epoch": part.leader_epoch, "live_end": -1,
                                "copied_to": -1 if position is None else position,
                                "offline_end": part.log.log_end_offset, "state": PAUSED, "error": None,
                                "lag": None, "lag_seconds": None, "messages_per_s": 0.0, "bytes_per_s": 0.0,
                                "messages": 0, "bytes": 0, "data_lost": 0, "updated_ms": int(time.time() * 1000)})
        client = self.services.registry.client

        def write() -> None:
            for r in reports:
                write_progress(client, self.link.name, r)

        try:
            await self._blocking(write)
        except Exception as e:  # progress is for operators: never fatal to the copy
            log.debug("mirror link %s: progress not written: %s", self.link.name, e)

    def _copier_reports(self, broker_id: int) -> list[dict]:
        """Each copier's report with its lag (messages, seconds) and throughput. Blocking: the age of the last
        copied message is read from the offline log's kept maximum timestamp."""
        reports = []
        for tp, c in list(self.copiers.items()):
            r = c.report(broker_id)
            lag = lag_messages(r["live_end"], r["copied_to"])
            copied_ts = None
            if lag:
                found = c.part.log.max_timestamp_offset(c.part.log.log_end_offset)
                copied_ts = found[1] if found is not None else None
            r["lag"], r["lag_seconds"] = lag, lag_seconds(lag, copied_ts)
            r["messages_per_s"], r["bytes_per_s"] = self.rates.rate(tp, r["messages"], r["bytes"])
            reports.append(r)
        self.rates.forget(set(self.copiers))
        self.lag_s = {(r["topic"], r["partition"]): r["lag_seconds"] for r in reports if r["lag_seconds"] is not None}
        return reports

    @property
    def failure(self) -> str | None:
        """Why this broker cannot run the link (its settings, the live cluster refusing them), or None."""
        return self._failure or None

    async def _report_failure(self, reason: str | None) -> None:
        """Say in the offline ZooKeeper that this broker cannot run the link (or no longer: None), on a change."""
        if reason == self._failure:
            return
        client, broker_id, name = self.services.registry.client, self.services.config.broker_id, self.link.name
        try:
            if reason is None:
                await self._blocking(clear_failure, client, name, broker_id)
            else:
                await self._blocking(write_failure, client, name, broker_id, reason)
            self._failure = reason
        except Exception as e:  # for operators: never fatal to the link
            log.debug("mirror link %s: failure state not written: %s", name, e)

    async def stop(self) -> None:
        copiers, self.copiers = list(self.copiers.values()), {}
        for copier in copiers:
            await copier.stop()
        if self.topic_sync is not None:
            await self._blocking(self.topic_sync.stop)
        if self.auditor is not None:
            await self._blocking(self.auditor.stop)
        if self.schema_sync is not None:
            await self._blocking(self.schema_sync.stop)
        if self.live is not None:
            await self._blocking(self.live.stop)
        client = self.services.registry.client

        def clear() -> None:
            for c in copiers:
                remove_progress(client, self.link.name, c.topic, c.partition)

        try:
            await self._blocking(clear)
        except Exception:
            pass
        if self._failure:
            await self._report_failure(None)
        log.info("mirror link %s: stopped on this broker", self.link.name)


def _load_settings(path: str) -> tuple[ClientConfig, ClientSecurity]:
    """The link's client settings and the TLS/SASL they make; ClientConfigError (one line) when they cannot."""
    config = ClientConfig.from_file(path)
    return config, config.security()


def _stamp(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size
