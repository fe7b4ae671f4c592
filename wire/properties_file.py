"""Java .properties text as Kafka's tools and brokers read it (key=value or key: value, # and ! comments): one
parser for the broker's server.properties and the clients' --command-config files."""

from __future__ import annotations


def parse_properties(text: str, source: str) -> dict[str, str]:
    """The settings in ``text``, later lines winning; ValueError ``source:LINE: ...`` for a line that is not
    key=value (the line is not quoted back: it may hold a password)."""
    props: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ValueError(f"{source}:{lineno}: expected key=value")
        props[line[:sep].strip()] = line[sep + 1:].strip()
    return props
