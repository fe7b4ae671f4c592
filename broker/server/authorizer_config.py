"""AuthorizerConfig: the broker's ACL settings (docs/acls.md). One group of BrokerConfig because they decide one
thing, who may do what: authorizer.class.name turns the authorizer on, super.users bypass the ACLs, and
allow.everyone.if.no.acl.found opens a resource that has no ACL at all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ferry.broker.server.config_values import ConfigError, parse_bool

# authorizer.class.name values that turn on ferry's authorizer (Kafka's names are accepted for familiarity)
AUTHORIZER_NAMES = ("ferry", "kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")
AUTHORIZER_KEYS = ("authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found")


@dataclass(frozen=True)
class AuthorizerConfig:
    class_name: str = ""  # empty: no authorization (every request allowed)
    super_users: tuple[str, ...] = ()  # principals as TYPE:NAME
    allow_everyone_if_no_acl_found: bool = False

    def __post_init__(self) -> None:
        if self.class_name and self.class_name not in AUTHORIZER_NAMES:
            raise ConfigError(f"authorizer.class.name: {self.class_name!r} is not an authorizer ferry has "
                              f"(use {' or '.join(AUTHORIZER_NAMES)}; empty: no authorization)")
        for principal in self.super_users:
            kind, sep, name = principal.partition(":")
            if not sep or not kind or not name:
                raise ConfigError(f"super.users: {principal!r} is not TYPE:NAME (e.g. User:admin;User:broker)")

    @property
    def enabled(self) -> bool:
        return bool(self.class_name)

    @classmethod
    def from_properties(cls, p: Mapping[str, str]) -> AuthorizerConfig:
        """From a broker's properties (super.users separated by ';', as Kafka's); ConfigError naming the setting."""
        return cls(
            class_name=p.get("authorizer.class.name", ""),
            super_users=tuple(u.strip() for u in p.get("super.users", "").split(";") if u.strip()),
            allow_everyone_if_no_acl_found=parse_bool("allow.everyone.if.no.acl.found",
                                                      p.get("allow.everyone.if.no.acl.found", "false")))
