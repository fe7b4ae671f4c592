"""The principal of a client certificate: its subject as an RFC 2253 distinguished name (``CN=app,OU=ops,O=ferry``,
the most specific part first, as Java's X500Principal.getName() spells it), then Kafka's
``ssl.principal.mapping.rules`` (KIP-371): ``RULE:pattern/replacement/[L|U]`` tried in order, ``DEFAULT``
keeping the whole name. A name no rule matches cannot authenticate (Kafka's behaviour)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# OpenSSL's long names (Python's getpeercert) -> the short ones of RFC 2253 / RFC 4514
_SHORT = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
          "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
          "domainComponent": "DC", "userId": "UID", "emailAddress": "EMAILADDRESS", "serialNumber": "SERIALNUMBER"}


def subject_dn(subject: tuple) -> str:
    """``getpeercert()["subject"]`` (RDNs in certificate order) -> its RFC 2253 string."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if not self.pattern.fullmatch(name):
            return None
        out = self.pattern.sub(self.replacement, name, count=1)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


class PrincipalMapper:
    """``ssl.principal.mapping.rules`` parsed once; ``name(dn)`` maps a subject, None if no rule matches."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = _parse(rules)

    def name(self, dn: str) -> str | None:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        return None


def _parse(text: str) -> list[_Rule]:
    rules: list[_Rule] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " ,\t\n":
            i += 1
        if i >= n:
            break
        if text.startswith("DEFAULT", i):
            rules.append(_Rule(None))
            i += len("DEFAULT")
            continue
        if not text.startswith("RULE:", i):
            raise ValueError(f"ssl.principal.mapping.rules: expected DEFAULT or RULE:pattern/replacement/ at "
                             f"{text[i:]!r}")
        i += len("RULE:")
        pattern, i = _until_slash(text, i)
        replacement, i = _until_slash(text, i)
        case = ""
        if i < n and text[i] in "LU":
            case = text[i]
            i += 1
        try:
            compiled = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {e}") from None
        # Java's $1 -> Python's \g<1>
        rules.append(_Rule(compiled, re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\", "\\\\")), case))
    if not rules:
        raise ValueError("ssl.principal.mapping.rules: no rule")
    return rules


def _until_slash(text: str, i: int) -> tuple[str, int]:
    out = []
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] == "/":
            out.append("/")
            i += 2
            continue
        if c == "/":
            return "".join(out), i + 1
        out.append(c)
        i += 1
    raise ValueError(f"ssl.principal.mapping.rules: unterminated RULE near {''.join(out)!r}")
