"""The brokers' Metadata through librdkafka (a Producer's or a Consumer's handle), with the one error for
"no broker answered": BrokerUnavailableError naming the bootstrap servers, whoever asked (the console tools,
the audit reader, the groups tool).

librdkafka logs each failed connect while the first metadata request waits; when no broker answers, the error
says so already, so those lines are held back for that request (later reconnects are logged as usual).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from confluent_kafka import KafkaException

from ferry.client.errors import BrokerUnavailableError

LIBRDKAFKA_LOG = "ferry.librdkafka"  # the logger the client hands librdkafka (rate-limited)


class MetadataHandle(Protocol):
    """confluent_kafka's Producer and Consumer (both answer list_topics)."""

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> object: ...

    def poll(self, timeout: float = -1) -> object: ...


@contextmanager
def quiet_librdkafka() -> Iterator[None]:
    log = logging.getLogger(LIBRDKAFKA_LOG)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def list_topics(handle: MetadataHandle, bootstrap: str, topic: str | None, timeout_s: float):
    """``handle.list_topics``; BrokerUnavailableError (one line, naming ``bootstrap``) when no broker answers."""
    with quiet_librdkafka():
        try:
            return handle.list_topics(topic, timeout=timeout_s)
        except KafkaException as exc:
            handle.poll(0)  # librdkafka's queued connect failures reach the (quiet) logger now, not at close
            err = exc.args[0] if exc.args else exc
            what = err.str() if hasattr(err, "str") else str(err)
            raise BrokerUnavailableError(f"cannot reach the brokers at {bootstrap}: {what}") from None
