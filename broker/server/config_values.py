"""The typed values of a broker's settings, read from their text: each error names its setting, so that a typo
stops the broker at start-up with a one-line message (exit code 2). Shared by BrokerConfig and the groups of
settings it is composed of (AuthorizerConfig)."""

from __future__ import annotations


class ConfigError(ValueError):
    """A missing or bad broker setting; the message names it."""


def check_port(what: str, port: int, allow_zero: bool) -> None:
    if port < (0 if allow_zero else 1) or port > 65535:
        raise ConfigError(f"{what}: port {port} is out of range")


def parse_int(key: str, text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{key}: expected an integer, got {text!r}") from None


def parse_bool(key: str, text: str) -> bool:
    """true/false, also as 1/0 and yes/no (the broker's switches have always taken them)."""
    t = str(text).strip().lower()
    if t in ("true", "1", "yes", "false", "0", "no"):
        return t in ("true", "1", "yes")
    raise ConfigError(f"{key}: expected true or false, got {text!r}")


def parse_positive_ms(key: str, text: str) -> int:
    value = parse_int(key, text)
    if value <= 0:
        raise ConfigError(f"{key} must be a positive number of milliseconds, got {text!r}")
    return value
