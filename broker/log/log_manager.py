"""All partition logs of one broker under one data directory, plus the threads that flush
them and apply retention.

Layout: ``<data dir>/<topic>-<partition>/`` per partition, ``recovery-point-offset-checkpoint``
(what each log had flushed, so start-up only verifies data beyond it), ``replication-offset-checkpoint``
(each replicated log's high watermark, so a restarted replica does not show consumers more than was
committed) and a ``.lock`` that keeps a second broker out of the same directory.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ferry.broker.log.log import Log, wall_clock_ms
from ferry.broker.log.log_dir_health import DirFailureListener, LogDirHealth, drop_page_cache
from ferry.broker.log.log_scheduler import LogScheduler
from ferry.broker.log.offset_checkpoint import read_checkpoint, write_checkpoint
from ferry.wire.atomic_file import atomic_write, fsync_dir
from ferry.wire.log_config import LogConfig
from ferry.wire.record.errors import KafkaStorageError, StorageError

logger = logging.getLogger("ferry.log")

CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
REPLICATION_CHECKPOINT_FILE = "replication-offset-checkpoint"  # Kafka's name and format: the HWs
DELETE_SUFFIX = "-delete"  # a deleted log's directory, renamed "<topic>-<partition>.<id>-delete" first
TOPIC_CONFIG_FILE = "topic-config.json"  # per partition dir: the last topic config given, for restarts
LOCK_FILE = ".lock"
CLOSE_THREADS = 8  # logs closed at once at shutdown (each close waits on a few fsyncs)
_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def validate_topic_partition(topic: str, partition: int) -> None:
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise ValueError(f"invalid topic name {topic!r}: use 1-249 of [A-Za-z0-9._-]")
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"invalid partition {partition!r}: must be an integer >= 0")


class LogManager:
    """The logs of one data directory: opened, created, deleted, flushed, checkpointed, retained; re-opened after
    the directory failed (its health is LogDirHealth's)."""

    def __init__(
        self,
        data_dir: Path | str,
        default_config: LogConfig | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 5_000,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.default_config = default_config if default_config is not None else LogConfig()
        self._clock = now_ms
        self._lock = threading.Lock()
        self._logs: dict[tuple[str, int], Log] = {}
        self._given: dict[tuple[str, int], dict[str, str]] = {}  # topic configs given (and saved) per log
        self._listeners: list[Callable[[Log], None]] = []
        self._scheduler = LogScheduler(now_ms, self.flush_pass, self.checkpoint_recovery_points, self.retention_pass,
                                       self._tick_seconds, checkpoint_interval_ms, retention_check_interval_ms)
        self._last_checkpoint: dict[tuple[str, int], int] = {}
        self._last_hw_checkpoint: dict[tuple[str, int], int] = {}
        self._closed = False
        self.health = LogDirHealth(self.data_dir, now_ms, lambda: list(self._logs.values()))
        self._reopen_points: dict[tuple[str, int], int] = {}
        self._reopen_hws: dict[tuple[str, int], int | None] = {}
        self._lock_fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StorageError(f"data directory {self.data_dir} is in use by another process") from None
        try:
            self._load_all()
        except BaseException:
            self._close_logs()
            os.close(self._lock_fd)
            raise

    # -- loading ---------------------------------------------------------------------------------

    def _load_all(self, flushed: Mapping[tuple[str, int], int] | None = None,
                  known_hws: Mapping[tuple[str, int], int | None] | None = None) -> None:
        """Open every log in the directory. ``flushed`` / ``known_hws``: recovery points and high watermarks
        known better than the checkpoint files say (a re-open after the directory was offline)."""
        checkpoint = read_checkpoint(self.data_dir / CHECKPOINT_FILE)
        checkpoint.update(flushed or {})
        hws: dict[tuple[str, int], int | None] = dict(read_checkpoint(self.data_dir / REPLICATION_CHECKPOINT_FILE))
        self._last_hw_checkpoint = {key: hw for key, hw in hws.items() if hw is not None}
        hws.update(known_hws or {})
        t0, loaded, segments, verified = time.monotonic(), 0, 0, 0
        for entry in sorted(os.listdir(self.data_dir)):
            path = self.data_dir / entry
            if entry.endswith(DELETE_SUFFIX) and path.is_dir():
                logger.info("removing %s, a log deleted before the last shutdown", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            topic, dash, part = entry.rpartition("-")
            if not dash or not part.isdigit() or not path.is_dir():
                continue
            try:
                validate_topic_partition(topic, int(part))
            except ValueError:
                logger.warning("ignoring directory %s: not <topic>-<partition>", path)
                continue
            key = (topic, int(part))
            try:
                config = self._saved_config(key, path)
                log = Log(path, config, self._clock, recovery_point=checkpoint.get(key),
                          replication_hw=hws.get(key))
            except Exception as exc:
                raise StorageError(f"cannot load the log in {path}: {exc}") from exc
            self._attach(key, log)
            loaded += 1
            segments += len(log.segments)
            verified += log.recovered_segments
        logger.info("loaded %d logs (%d segments, %d verified) in %.1f s", loaded, segments, verified,
                    time.monotonic() - t0)
        self.checkpoint_recovery_points()

    def _saved_config(self, key: tuple[str, int], path: Path) -> LogConfig:
        """The topic config last given for this log, so retention and segment sizes are right
        from the start, before the server hands over the topic's current config (remembered as given:
        the same config handed over again is neither parsed nor saved again)."""
        try:
            saved = {str(k): str(v) for k, v in json.loads((path / TOPIC_CONFIG_FILE).read_text()).items()}
            config = LogConfig.from_topic_config(saved, self.default_config)
            self._given[key] = saved
            return config
        except FileNotFoundError:
            return self.default_config
        except (OSError, ValueError, AttributeError) as exc:
            logger.warning("ignoring %s: %s", path / TOPIC_CONFIG_FILE, exc)
            return self.default_config

    @staticmethod
    def _save_config(path: Path, topic_config: Mapping[str, str]) -> None:
        atomic_write(path / TOPIC_CONFIG_FILE, json.dumps(dict(topic_config), sort_keys=True).encode(),
                     fsync=False, sync_dir=False)

    def _attach(self, key: tuple[str, int], log: Log) -> None:
        log.restore_log_start()  # a DeleteRecords start inside a segment, on every open (start-up, re-open)
        log.flush_requested = self._on_flush_requested
        log.io_failed = self.health.log_failed
        for cb in self._listeners:
            log.add_high_watermark_listener(cb)
        self._logs[key] = log

    # -- the directory's health (LogDirHealth) ---------------------------------------------------------

    @property
    def offline(self) -> bool:
        """The directory failed (the reason and the count of offline directories are ``health``'s)."""
        return self.health.offline

    def add_dir_failure_listener(self, callback: DirFailureListener) -> None:
        self.health.add_dir_failure_listener(callback)

    def dir_failed(self, what: str, exc: OSError) -> None:
        self.health.dir_failed(what, exc)

    def probe(self) -> bool:
        return self.health.probe()

    def reopen(self) -> int:
        """Bring an offline directory back: close the logs (nothing written), drop their page cache, open them
        again with recovery. Returns how many logs are open. Raises (StorageError, OSError) if that fails: the
        directory stays offline and the next probe tries again."""
        with self._lock:
            old = dict(self._logs)
            # what each log really flushed (kept across failed attempts: a failed one leaves no logs open)
            points = self._reopen_points = {**self._reopen_points,
                                            **{key: lg.flushed_offset for key, lg in old.items()}}
            hws = self._reopen_hws = {**self._reopen_hws, **{key: lg.replication_hw for key, lg in old.items()}}
            self.health.retire(old.values(), self.default_config.file_delete_delay_ms)
            self._logs = {}
            self._given = {}
            for lg in old.values():
                drop_page_cache(lg.dir)
            try:
                self._load_all(points, hws)
            except BaseException:
                for lg in self._logs.values():
                    lg.mark_offline()
                    lg.close()
                self._logs = {}
                raise
            self._reopen_points, self._reopen_hws = {}, {}
            self.health.back_online()
            logs = list(self._logs.values())
        verified = sum(lg.recovered_segments for lg in logs)
        logger.info("log dir %s back online: %d log(s) re-opened, %d segment(s) verified", self.data_dir,
                    len(logs), verified)
        return len(logs)

    # -- access ----------------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Log | None:
        """The partition's log if it is open here (never creates one)."""
        return self._logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, topic_config: Mapping[str, str] | None = None) -> Log:
        """The partition's log, created if new. A given ``topic_config`` (Kafka names) is applied
        to an existing log too; ValueError for a bad name or config value."""
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None and (topic_config is None or self._given.get(key) == topic_config):
            return log  # the hot path: nothing to parse or save
        validate_topic_partition(topic, partition)
        config = LogConfig.from_topic_config(topic_config, self.default_config)
        with self._lock:
            if self._closed:
                raise StorageError("log manager is shut down")
            if self.offline:
                raise KafkaStorageError(f"log dir {self.data_dir} is offline")
            log = self._logs.get(key)
            if log is None:
                try:
                    log = Log(self.data_dir / f"{topic}-{partition}", config, self._clock)
                except OSError as e:
                    self.dir_failed(f"creating the log of {topic}-{partition}", e)
                    raise KafkaStorageError(f"cannot create the log of {topic}-{partition}: {e}") from e
                self._attach(key, log)
                logger.debug("created log %s-%d", topic, partition)  # ReplicaManager sums them up per topic
            elif log.config != config:
                log.update_config(config)
            if topic_config is not None and self._given.get(key) != topic_config:
                try:
                    self._save_config(log.dir, topic_config)
                except OSError:
                    logger.exception("could not save the topic config of %s", log.name)
                self._given[key] = dict(topic_config)
            return log

    def all_logs(self) -> dict[tuple[str, int], Log]:
        return dict(self._logs)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close one log and delete its directory (this broker no longer holds a replica of it): renamed
        ``<topic>-<partition>.<id>-delete`` first, so a crash halfway never leaves a log that loads.
        False if it was not open."""
        key = (topic, partition)
        with self._lock:
            log = self._logs.pop(key, None)
            self._given.pop(key, None)
        if log is None:
            return False
        log.close()
        doomed = log.dir.with_name(f"{log.dir.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}")
        os.rename(log.dir, doomed)
        fsync_dir(self.data_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        logger.info("deleted log %s-%d", topic, partition)
        return True

    def add_high_watermark_listener(self, callback: Callable[[Log], None]) -> None:
        """Register ``callback(log)`` on every log, present and future (see Log)."""
        with self._lock:
            self._listeners.append(callback)
            for log in self._logs.values():
                log.add_high_watermark_listener(callback)

    # -- flushing, checkpoints, retention ------------------------------------------------------

    def _on_flush_requested(self, log: Log) -> None:
        self._scheduler.wake()

    def checkpoint_recovery_points(self) -> None:
        """Persist every log's flushed offset and every replicated log's high watermark (each file when
        it changed), and producer-state snapshots."""
        if self.offline:
            return  # the files stay as they were; the next open verifies from older points
        logs = list(self._logs.items())
        try:
            for _, log in logs:
                log.snapshot_producer_state()
            offsets = {key: log.flushed_offset for key, log in logs}
            if offsets != self._last_checkpoint:
                write_checkpoint(self.data_dir / CHECKPOINT_FILE, offsets)
                self._last_checkpoint = offsets
            self.checkpoint_high_watermarks(logs)
        except KafkaStorageError:
            pass  # a log's snapshot failed: the directory is offline (reported once)
        except OSError as e:
            self.dir_failed("writing a checkpoint", e)

    def checkpoint_high_watermarks(self, logs: list[tuple[tuple[str, int], Log]] | None = None) -> None:
        """Persist the replication high watermark of every log that has one (when any changed)."""
        if logs is None:
            logs = list(self._logs.items())
        hws = {key: hw for key, log in logs if (hw := log.replication_hw) is not None}
        if hws != self._last_hw_checkpoint:
            write_checkpoint(self.data_dir / REPLICATION_CHECKPOINT_FILE, hws)
            self._last_hw_checkpoint = hws

    def flush_pass(self) -> int:
        """Flush every log that needs it (flush.messages / flush.ms). Returns how many."""
        now = self._clock()
        self.health.close_retired()
        return self._each_log("flush", lambda log: _flush_if_needed(log, now))

    def retention_pass(self) -> int:
        """Roll aged active segments, delete retained ones, forget long-idle producer ids. Returns segments
        deleted."""
        return self._each_log("retention", _retain)

    def _each_log(self, task: str, run: Callable[[Log], int]) -> int:
        """A background pass over every log, summing what ``run`` returns: it stops when the directory goes
        offline (reported once); any other failure of one log is logged and the pass goes on."""
        total = 0
        for log in list(self._logs.values()):
            if self.offline:
                break
            try:
                total += run(log)
            except KafkaStorageError:
                break  # the directory is offline (reported once)
            except Exception:
                logger.exception("%s of %s failed", task, log.name)
        return total

    def _tick_seconds(self) -> float:
        intervals = [log.config.flush_interval_ms for log in list(self._logs.values())]
        intervals.append(self.default_config.flush_interval_ms)
        return min(1.0, max(0.005, min(intervals) / 4000))

    def start_background(self) -> None:
        """Start the flusher and retention threads (daemon threads; stop with shutdown())."""
        self._scheduler.start()

    def shutdown(self) -> None:
        """Stop the threads, flush and close every log, write the checkpoint, release the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._scheduler.stop()
        self._close_logs()
        try:
            self.checkpoint_recovery_points()
        except OSError:
            logger.exception("could not write the recovery point checkpoint")
        os.close(self._lock_fd)

    def _close_logs(self) -> None:
        """Close every log on CLOSE_THREADS threads (Kafka's num.recovery.threads.per.data.dir): a close is
        mostly fsyncs, which overlap; one by one, 10,000 logs took minutes and the broker was killed."""
        self.health.close_retired(force=True)
        logs = list(self._logs.values())

        def close(log: Log) -> None:
            try:
                log.close()
            except Exception:
                logger.exception("closing %s failed", log.name)

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(1, min(CLOSE_THREADS, len(logs))), thread_name_prefix="log-close") as pool:
            list(pool.map(close, logs))
        logger.log(logging.INFO if len(logs) >= 100 else logging.DEBUG, "closed %d logs in %.1f s", len(logs),
                   time.monotonic() - t0)

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _flush_if_needed(log: Log, now_ms: int) -> int:
    """1 when the log was due a flush (flush.messages / flush.ms) and got it."""
    if not log.needs_flush(now_ms):
        return 0
    log.flush()
    return 1


def _retain(log: Log) -> int:
    """Retention of one log; returns the segments deleted."""
    log.roll_if_needed()
    deleted = log.delete_retained()
    log.expire_producers()
    return deleted
