"""The client library's one error hierarchy; every message is fit to show a CLI user.

A broker's answer with an error code becomes a :class:`KafkaResponseError` carrying ``code`` and
``error_name``; :func:`for_code` picks the subclass of that code (Kafka's ``Errors.forCode``), so callers
catch what they can act on — an out-of-range offset, a leader that moved — and everything else as one type.
ClientError and KafkaResponseError are defined at the protocol layer and UnknownTopicError with the
registry's errors, so that the registry and the client raise one class for an unknown topic.
"""

from __future__ import annotations

from ferry.wire.connection_errors import BrokerUnavailableError
from ferry.wire.protocol.errors import ClientError, ErrorCode, KafkaResponseError
from ferry.zk.errors import UnknownTopicError

__all__ = [
    "BrokerUnavailableError", "ClientError", "ConsumerRebalanceFailedError", "CorruptMessageSetError", "FetchError",
    "KafkaResponseError", "MessageTooLargeError", "NoBrokersAvailableError", "NotLeaderError", "OffsetOutOfRangeError",
    "ProduceError", "ProducerClosedError", "UnknownPartitionError", "UnknownTopicError", "for_code",
]


class NoBrokersAvailableError(ClientError):
    """No broker is registered in ZooKeeper (so there is nothing to bootstrap from)."""


class ConsumerRebalanceFailedError(ClientError):
    """Ownership claims kept colliding for all the allowed retries."""


class ProducerClosedError(ClientError):
    """send() after close()."""


class FetchError(KafkaResponseError):
    """The broker answered a fetch with an error code."""


class OffsetOutOfRangeError(FetchError):
    """The fetch offset is below the log start or beyond the log end (``log_start``, ``log_end``)."""

    CODE = ErrorCode.OFFSET_OUT_OF_RANGE

    def __init__(self, what: str, log_start: int | None = None, log_end: int | None = None) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, what)
        self.log_start, self.log_end = log_start, log_end


class CorruptMessageSetError(FetchError):
    """A fetched batch whose bytes do not match its CRC-32C, or that does not parse."""

    CODE = ErrorCode.CORRUPT_MESSAGE

    def __init__(self, what: str, code: int = ErrorCode.CORRUPT_MESSAGE) -> None:
        super().__init__(code, what)
        self.args = (what,)


class UnknownPartitionError(UnknownTopicError):
    """The topic exists but has no such partition."""


class NotLeaderError(KafkaResponseError):
    """The broker is not the partition's leader (any more): look the leader up again."""

    CODE = ErrorCode.NOT_LEADER_OR_FOLLOWER


class MessageTooLargeError(KafkaResponseError):
    """A message set over the broker's or topic's size limit (nothing of it was written)."""

    CODE = ErrorCode.MESSAGE_TOO_LARGE


class ProduceError(KafkaResponseError):
    """The broker refused a message set (nothing of it was written): ``code``, ``error_name``, ``broker_message``."""

    def __init__(self, code: int, topic: str, partition: int, seq: int, broker_message: str | None) -> None:
        super().__init__(code, f"message set #{seq} to {topic}[{partition}] refused")
        self.topic, self.partition, self.seq, self.broker_message = topic, partition, seq, broker_message
        if broker_message:
            self.args = (f"{self.args[0]}: {broker_message}",)


_BY_CODE: dict[int, type[KafkaResponseError]] = {
    cls.CODE: cls for cls in (OffsetOutOfRangeError, CorruptMessageSetError, UnknownTopicError, NotLeaderError,
                              MessageTooLargeError)
}


def for_code(code: int, what: str) -> KafkaResponseError:
    """The exception for a broker's error ``code`` (the most specific class known, else KafkaResponseError)."""
    cls = _BY_CODE.get(int(code))
    if cls is None:
        return KafkaResponseError(int(code), what)
    if cls in (OffsetOutOfRangeError, CorruptMessageSetError, UnknownTopicError):
        err = cls(what)
        if cls is not OffsetOutOfRangeError:
            err.args = (f"{what}: error {int(code)} ({err.error_name})",)
        return err
    return cls(int(code), what)
