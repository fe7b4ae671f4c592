"""The client's one error hierarchy: a broker's error code maps to one exception class (for_code)."""

from __future__ import annotations

import pytest

from ferry.client import errors
from ferry.wire.protocol.errors import ErrorCode


@pytest.mark.parametrize(("code", "cls"), [
    (ErrorCode.OFFSET_OUT_OF_RANGE, errors.OffsetOutOfRangeError),
    (ErrorCode.CORRUPT_MESSAGE, errors.CorruptMessageSetError),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, errors.UnknownTopicError),
    (ErrorCode.NOT_LEADER_OR_FOLLOWER, errors.NotLeaderError),
    (ErrorCode.MESSAGE_TOO_LARGE, errors.MessageTooLargeError),
    (ErrorCode.NOT_ENOUGH_REPLICAS, errors.KafkaResponseError),
])
def test_for_code_picks_the_class_of_the_code(code, cls) -> None:
    e = errors.for_code(code, "fetch from t[0]")
    assert type(e) is cls and isinstance(e, errors.ClientError)
    assert e.code == code and e.error_name == ErrorCode(code).name
    assert str(e) == f"fetch from t[0]: error {int(code)} ({ErrorCode(code).name})"


def test_every_class_names_its_code_once() -> None:
    coded = [c for c in vars(errors).values()
             if isinstance(c, type) and issubclass(c, errors.KafkaResponseError) and c.CODE is not None]
    codes = [c.CODE for c in coded if c is not errors.UnknownPartitionError]
    assert len(codes) == len(set(codes))
    assert all(errors.for_code(c.CODE, "x").__class__ is c for c in coded if c is not errors.UnknownPartitionError)


def test_messages_fit_for_a_user() -> None:
    assert str(errors.UnknownTopicError("topic 'x' does not exist")) == "topic 'x' does not exist"
    oor = errors.OffsetOutOfRangeError("t[0] at 9", 0, 5)
    assert (oor.log_start, oor.log_end, oor.code) == (0, 5, 1) and isinstance(oor, errors.FetchError)
    assert issubclass(errors.BrokerUnavailableError, ConnectionError)
