"""ClientConfig: how ferry's own clients reach a secured listener, in librdkafka's client properties
(`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
`ssl.certificate.location`, `ssl.key.location`, ...), read from a Java .properties file as Kafka's tools read
`--command-config`. One object feeds both kinds of client: ferry's wire clients get `security()` (an
SSLContext and a SaslLogin), confluent-kafka gets `librdkafka()`; `to_properties_text()` hands the same
settings to a child process in a private file, so that a secret never rides on a command line.

Where a command's settings come from (`from_sources`): the file its flag names, else the file named by
$FERRY_CLIENT_CONFIG, else plaintext. The password never appears in a repr, a log line or an error message.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from ferry.wire.properties_file import parse_properties
from ferry.wire.sasl_login import ClientSecurity, SaslLogin
from ferry.wire.scram import MECHANISMS

ENV_CLIENT_CONFIG = "FERRY_CLIENT_CONFIG"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *MECHANISMS)
SECRET_KEYS = frozenset({"sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password",
                         "sasl.jaas.config", "ssl.key.pem"})
# Java clients' spellings librdkafka does not take (read here, never handed to confluent-kafka)
JAVA_ONLY_KEYS = frozenset({"sasl.jaas.config", "ssl.truststore.location", "ssl.truststore.type",
                            "ssl.truststore.password", "ssl.keystore.type"})
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class ClientConfigError(ValueError):
    """A client setting that cannot work (a bad value, a file that cannot be read); one line, never a secret."""


@dataclass(frozen=True)
class ClientConfig:
    """librdkafka-style client properties, checked when made; ``source`` names where they came from (errors
    say so). Immutable: a command hands one object to every client it builds."""

    properties: Mapping[str, str] = field(default_factory=dict)
    source: str = "defaults"

    def __post_init__(self) -> None:
        props = {k: str(v).strip() for k, v in self.properties.items()}
        if "sasl.mechanisms" in props and "sasl.mechanism" not in props:  # librdkafka's older spelling
            props["sasl.mechanism"] = props.pop("sasl.mechanisms")
        props.pop("sasl.mechanisms", None)
        if "sasl.jaas.config" in props:  # a Java client's file: username and password from the JAAS line
            options = dict(_JAAS_OPTION.findall(props["sasl.jaas.config"]))
            for key in ("username", "password"):
                if key in options:
                    props.setdefault(f"sasl.{key}", options[key])
        if "ssl.truststore.location" in props and props.get("ssl.truststore.type", "PEM").upper() == "PEM":
            props.setdefault("ssl.ca.location", props["ssl.truststore.location"])
        if "security.protocol" in props:
            props["security.protocol"] = props["security.protocol"].upper()
        object.__setattr__(self, "properties", MappingProxyType(props))
        self._check()

    # ------------------------------------------------------------------ making one
    @classmethod
    def plaintext(cls) -> ClientConfig:
        return cls({}, "defaults")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ClientConfig:
        """The settings of a .properties file; ClientConfigError (one line naming the file) when it is missing,
        unreadable or holds a bad value."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ClientConfigError(f"client config {path}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise ClientConfigError(f"client config {path}: not a text file") from None
        try:
            return cls(parse_properties(text, f"client config {path}"), str(path))
        except ClientConfigError:
            raise
        except ValueError as e:
            raise ClientConfigError(str(e)) from None

    @classmethod
    def from_sources(cls, command_config: str | os.PathLike | None,
                     environ: Mapping[str, str] = os.environ) -> ClientConfig:
        """The file the flag names, else the file $FERRY_CLIENT_CONFIG names, else plaintext."""
        path = command_config or environ.get(ENV_CLIENT_CONFIG)
        return cls.from_file(path) if path else cls.plaintext()

    def merged(self, overrides: Mapping[str, str]) -> ClientConfig:
        """These settings with ``overrides`` on top (a tool's own client.id, a flag's value)."""
        return ClientConfig({**self.properties, **overrides}, self.source)

    # ------------------------------------------------------------------ reading it
    def get(self, key: str, default: str | None = None) -> str | None:
        return self.properties.get(key, default)

    @property
    def security_protocol(self) -> str:
        return self.properties.get("security.protocol", "PLAINTEXT")

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def is_plaintext(self) -> bool:
        return self.security_protocol == "PLAINTEXT"

    def security(self) -> ClientSecurity:
        """TLS and SASL for ferry's wire clients (wire/broker_connection.py); ClientConfigError if a certificate,
        key or CA file cannot be loaded."""
        tls = self.ssl_context() if self.uses_tls else None
        sasl = SaslLogin(self.properties.get("sasl.mechanism", "PLAIN"), self.properties.get("sasl.username", ""),
                         self.properties.get("sasl.password", "")) if self.uses_sasl else None
        return ClientSecurity(tls, sasl)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context: TLS 1.2 or later, the broker checked against ssl.ca.location (else the system's
        CAs) and its name unless ssl.endpoint.identification.algorithm=none, a client certificate if given."""
        p = self.properties
        unread = [k for k in ("ssl.keystore.location", "ssl.certificate.pem", "ssl.key.pem") if p.get(k)]
        if unread and not p.get("ssl.certificate.location"):  # a certificate silently not presented: refuse
            raise ClientConfigError(f"{self.source}: {unread[0]} is not read by ferry's own clients: give the "
                                    "client certificate as PEM files (ssl.certificate.location, ssl.key.location)")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            ca = p.get("ssl.ca.location")
            if p.get("ssl.ca.pem"):
                ctx.load_verify_locations(cadata=p["ssl.ca.pem"])
            elif ca and Path(ca).is_dir():
                ctx.load_verify_locations(capath=ca)
            elif ca:
                ctx.load_verify_locations(cafile=ca)
            else:
                ctx.load_default_certs()
            if p.get("ssl.certificate.location"):
                ctx.load_cert_chain(p["ssl.certificate.location"], p.get("ssl.key.location") or None,
                                    password=p.get("ssl.key.password") or None)
        except (OSError, ssl.SSLError) as e:
            raise ClientConfigError(f"{self.source}: cannot load the TLS files: {_tls_problem(e)}") from None
        if p.get("ssl.endpoint.identification.algorithm", "https").lower() in ("none", ""):
            ctx.check_hostname = False
        if not _bool(p, "enable.ssl.certificate.verification", True):
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def librdkafka(self) -> dict[str, str]:
        """What confluent-kafka gets: every setting but the Java clients' own spellings."""
        return {k: v for k, v in self.properties.items() if k not in JAVA_ONLY_KEYS}

    def to_properties_text(self) -> str:
        """The settings as a .properties file (for a child process; write it private: `write_private`)."""
        lines = [f"# ferry client settings (from {self.source})"]
        lines += [f"{k}={v}" for k, v in sorted(self.properties.items()) if "\n" not in v]
        return "\n".join(lines) + "\n"

    def write_private(self, path: str | os.PathLike) -> Path:
        """Write `to_properties_text` to ``path``, readable by this user only (0600 from the start)."""
        path = Path(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(self.to_properties_text())
        return path

    def redacted(self) -> dict[str, str]:
        return {k: ("[hidden]" if k in SECRET_KEYS else v) for k, v in self.properties.items()}

    def __reduce__(self) -> tuple:  # picklable (a Spark task, a process pool): the mapping proxy is not
        return (ClientConfig, (dict(self.properties), self.source))

    def __repr__(self) -> str:  # never a secret in a log line or a traceback
        return f"ClientConfig({self.source}: {self.redacted()})"

    __str__ = __repr__

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        p, where = self.properties, self.source
        protocol = self.security_protocol
        if protocol not in PROTOCOLS:
            raise ClientConfigError(f"{where}: security.protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            mechanism = p.get("sasl.mechanism", "PLAIN")
            if mechanism not in SASL_MECHANISMS:
                raise ClientConfigError(f"{where}: sasl.mechanism {mechanism!r}: expected one of "
                                        f"{', '.join(SASL_MECHANISMS)}")
            for key in ("sasl.username", "sasl.password"):
                if not p.get(key):
                    raise ClientConfigError(f"{where}: security.protocol {protocol} needs {key}")
        algorithm = p.get("ssl.endpoint.identification.algorithm", "https").lower()
        if algorithm not in ("https", "none", ""):
            raise ClientConfigError(f"{where}: ssl.endpoint.identification.algorithm {algorithm!r}: "
                                    "expected https or none")
        _bool(p, "enable.ssl.certificate.verification", True, where)


def _bool(p: Mapping[str, str], key: str, default: bool, where: str = "") -> bool:
    text = p.get(key)
    if text is None or text == "":
        return default
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise ClientConfigError(f"{where}: {key} {text!r}: expected true or false")


def _tls_problem(e: OSError) -> str:
    """An ssl or file error in a few words, with the file it names."""
    if not isinstance(e, ssl.SSLError) and e.strerror:
        return e.strerror + (f": {e.filename}" if e.filename else "")
    return getattr(e, "reason", None) or str(e)
