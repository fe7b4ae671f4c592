"""Errors of the client library; every message is fit to show a CLI user."""

from __future__ import annotations


class ClientError(Exception):
    """Base class of client-library errors."""


class NoBrokersAvailableError(ClientError):
    """No broker is registered in ZooKeeper (so there is nothing to bootstrap from)."""


class UnknownTopicError(ClientError):
    """The topic is not registered in the cluster."""


class ConsumerRebalanceFailedError(ClientError):
    """Ownership claims kept colliding for all the allowed retries."""


class ProducerClosedError(ClientError):
    """send() after close()."""
