"""EmbeddedMirror: the mirror links an offline broker runs (the paper's embedded consumers; docs/mirror.md).

A broker plugin (broker/server/broker_plugin.py) composed into `ferry broker` (ferry/broker_cmd.py). Every
second, and at once when ZooKeeper says a link was created, changed or deleted (a watch on each read), it reads
the offline cluster's links (``/mirror/links``, zk/mirror_links.py) and brings its LinkRunners
in line: a new link starts, a deleted one stops (its copiers first), a changed one (or one whose --source-config
file changed) restarts, a paused one keeps its runner but stops its copiers. With no link stored it costs one
ZooKeeper read a second.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from ferry.broker.server.broker_plugin import BrokerServices
from ferry.broker.server.task_cancel import cancel_and_wait
from ferry.mirror.embedded_link import LinkRunner
from ferry.mirror.link_overlap import LinkOverlap
from ferry.mirror.link_progress import FAILED, clear_failure
from ferry.mirror.partition_mirror import backoff
from ferry.zk.mirror_links import PAUSED, MirrorLink, MirrorLinkStore

log = logging.getLogger("ferry.mirror.embedded")

PASS_INTERVAL_S = 1.0


class EmbeddedMirror:
    def __init__(self, pass_interval_s: float = PASS_INTERVAL_S) -> None:
        self.pass_interval_s = pass_interval_s
        self.runners: dict[str, LinkRunner] = {}
        self._start_failures: dict[str, tuple[int, float]] = {}  # link -> (failed starts in a row, next try)
        self._starting: dict[str, asyncio.Task] = {}  # link -> its runner's start, under way
        self._start_errors: dict[str, str | None] = {}  # link -> why its last start failed here (its settings)
        self.services: BrokerServices | None = None
        self._task: asyncio.Task | None = None
        self._changed: asyncio.Event | None = None  # set from a ZooKeeper watch: a link changed, pass now

    async def start(self, services: BrokerServices) -> None:
        self.services = services
        self._changed = asyncio.Event()
        self._task = services.loop.create_task(self._run(), name="embedded-mirror")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait([task, *self._starting.values()])
        self._starting.clear()
        for runner in list(self.runners.values()):
            await runner.stop()
        self.runners.clear()

    def collect(self) -> Iterator[Metric]:
        """Per link and partition led here: live end, copied to, lag (messages, seconds), messages, bytes, data
        lost, state; per link: paused, failed (read from the copiers at scrape time; nothing is counted on the
        copy path). docs/metrics.md lists them; the shipped alert rules read lag, failed and paused."""
        labels = ["link", "topic", "partition"]
        live_end = GaugeMetricFamily("ferry_mirror_link_live_end", "live last stable offset at the last fetch",
                                     labels=labels)
        copied = GaugeMetricFamily("ferry_mirror_link_copied_to", "live offset the copy reached", labels=labels)
        lag = GaugeMetricFamily("ferry_mirror_link_lag_messages", "live end minus copied-to", labels=labels)
        lag_s = GaugeMetricFamily("ferry_mirror_link_lag_seconds", "age of the last copied message while messages "
                                  "wait to be copied, 0 when caught up (at the link's last report)", labels=labels)
        messages = CounterMetricFamily("ferry_mirror_link_messages", "records appended by this leader's copier",
                                       labels=labels)
        nbytes = CounterMetricFamily("ferry_mirror_link_bytes", "record batch bytes appended by this leader's "
                                     "copier", labels=labels)
        lost = CounterMetricFamily("ferry_mirror_link_data_lost_messages",
                                   "live offsets deleted by live retention before they were copied; must stay 0",
                                   labels=labels)
        state = GaugeMetricFamily("ferry_mirror_link_state", "1 for the copier's state", labels=[*labels, "state"])
        paused = GaugeMetricFamily("ferry_mirror_link_paused", "1 while the link is paused", labels=["link"])
        failed = GaugeMetricFamily("ferry_mirror_link_failed", "1 while this broker cannot run the link (its "
                                   "settings, the live cluster refusing them, a batch it cannot copy)", labels=["link"])
        for name, reason in list(self._start_errors.items()):
            if name not in self.runners:
                failed.add_metric([name], 1 if reason else 0)
        for name, runner in list(self.runners.items()):
            paused.add_metric([name], 1 if runner.link.state == PAUSED else 0)
            copiers = list(runner.copiers.items())
            failed.add_metric([name], 1 if runner.failure or any(c.progress.state == FAILED for _, c in copiers)
                              else 0)
            for (topic, p), copier in copiers:
                key = [name, topic, str(p)]
                pr = copier.progress
                live_end.add_metric(key, pr.live_end)
                copied.add_metric(key, pr.copied_to)
                if pr.live_end >= 0 and pr.copied_to >= 0:
                    lag.add_metric(key, max(pr.live_end - pr.copied_to, 0))
                seconds = runner.lag_s.get((topic, p))
                if seconds is not None:
                    lag_s.add_metric(key, seconds)
                messages.add_metric(key, pr.messages)
                nbytes.add_metric(key, pr.bytes)
                lost.add_metric(key, pr.data_lost)
                state.add_metric([*key, pr.state], 1)
        yield from (live_end, copied, lag, lag_s, messages, nbytes, lost, state, paused, failed)

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                await self.run_pass()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("embedded mirror: pass failed (%d times in a row; retrying): %s", failures,
                                " ".join((str(e) or type(e).__name__).split()))
            changed = self._changed
            assert changed is not None
            try:
                await asyncio.wait_for(changed.wait(), self.pass_interval_s)
            except TimeoutError:
                pass
            changed.clear()

    def _on_change(self, _event: object) -> None:
        """A ZooKeeper watch fired (kazoo's thread): run the next pass now, not at the next second (a deleted or
        paused link stops at once)."""
        services, changed = self.services, self._changed
        if services is None or changed is None:
            return
        try:
            services.loop.call_soon_threadsafe(changed.set)
        except RuntimeError:  # the loop closed: the broker is stopping
            pass

    def _links(self) -> tuple[dict[str, MirrorLink], dict[str, int]]:
        """The stored links by name, and their creation order (link_overlap.py)."""
        assert self.services is not None
        store = MirrorLinkStore(self.services.registry.client)
        links = {link.name: link for link in store.all(self._on_change)}
        return links, store.creation_order(list(links))

    async def _started(self, name: str, link: MirrorLink) -> LinkRunner | None:
        """The link's runner once its start (a task of its own: a live ZooKeeper that does not answer takes its
        connect timeout, and the other links' passes go on meanwhile) succeeded; None until then."""
        services = self.services
        assert services is not None
        starting = self._starting.get(name)
        if starting is not None:
            if not starting.done():
                return None
            del self._starting[name]
            if starting.cancelled() or starting.exception() is not None:
                log.warning("mirror link %s: start failed: %s", name, "cancelled" if starting.cancelled()
                            else " ".join((str(starting.exception()) or type(starting.exception()).__name__).split()))
                self._failed_start(name)
                return None
            runner, ok = starting.result()
            self._start_errors[name] = None if ok else runner.failure
            if ok and runner.same_source(link):
                self._start_failures.pop(name, None)
                self.runners[name] = runner
                return runner
            if ok:  # the link changed while it started: start it anew
                await runner.stop()
            else:
                self._failed_start(name)
            return None
        failures, next_try = self._start_failures.get(name, (0, 0.0))
        if services.loop.time() >= next_try:
            runner = LinkRunner(link, services)

            async def start() -> tuple[LinkRunner, bool]:
                return runner, await runner.start(failures + 1)

            self._starting[name] = services.loop.create_task(start(), name=f"mirror-link-{name}-start")
        return None

    def _failed_start(self, name: str) -> None:
        assert self.services is not None
        failures = self._start_failures.get(name, (0, 0.0))[0] + 1
        self._start_failures[name] = (failures, self.services.loop.time() + backoff(failures))

    async def _clear_failure(self, name: str) -> None:
        """A deleted link's failure, if a start of it here reported one, goes with it."""
        services = self.services
        assert services is not None
        await services.loop.run_in_executor(services.executor, clear_failure, services.registry.client, name,
                                            services.config.broker_id)

    async def run_pass(self) -> None:
        services = self.services
        assert services is not None
        links, created = await services.loop.run_in_executor(services.executor, self._links)
        for name in set(self._start_errors) - set(links):
            del self._start_errors[name]
        for name in set(self._start_failures) - set(links):  # deleted while it could not start
            del self._start_failures[name]
            await self._clear_failure(name)
        for name in set(self._starting) - set(links):  # deleted while starting: stop it once its start ends
            task = self._starting[name]
            if task.done():
                del self._starting[name]
                if not task.cancelled() and task.exception() is None:
                    await task.result()[0].stop()
                await self._clear_failure(name)
        for name, runner in list(self.runners.items()):
            link = links.get(name)
            if link is None or not runner.same_source(link) or \
                    await services.loop.run_in_executor(services.executor, runner.settings_changed):
                del self.runners[name]
                await runner.stop()
        started: dict[str, LinkRunner] = {}
        for name, link in sorted(links.items()):
            runner = self.runners.get(name)
            if runner is None:
                runner = await self._started(name, link)
                if runner is None:
                    continue
                links[name] = runner.link  # with its producer id and live cluster
            started[name] = runner
        known = [replace(lk, source_cluster=lk.source_cluster or started[n].source_cluster) if n in started else lk
                 for n, lk in links.items()]  # the live cluster as stored, or as a runner here just read it
        overlap = LinkOverlap(known, created)
        for name, runner in started.items():
            await runner.reconcile(links[name], overlap)
