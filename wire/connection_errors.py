"""The errors of talking to a broker over a Kafka connection. They are shared by everything that speaks the
protocol to a broker, the client library and brokers talking to each other (as Kafka's common.errors), so
they live with the connection; client/errors.py builds the client's hierarchy on them."""

from __future__ import annotations

from ferry.wire.protocol.errors import ClientError

__all__ = ["BrokerUnavailableError", "ClientError", "unavailable"]


class BrokerUnavailableError(ClientError, ConnectionError):
    """No connection to a broker (refused, reset, timed out) or no broker known for a partition."""


def unavailable(node_id: int, address: str, what: str, err: BaseException | None = None,
                lost: int = 0) -> BrokerUnavailableError:
    """The error of a connection that broke, naming the broker and how many requests are lost (their effect
    on the broker is unknown)."""
    detail = f": {err}" if err is not None else ""
    unanswered = f"; {lost} requests unanswered" if lost else ""
    return BrokerUnavailableError(f"broker {node_id} at {address}: {what}{detail}{unanswered}")
