"""The broker's ACL settings (authorizer.class.name, super.users, allow.everyone.if.no.acl.found) as a broker's
properties give them: off by default, Kafka's spellings accepted, and every bad value a ConfigError that names its
setting (the broker then exits 2; end to end: test_acls.py)."""

from __future__ import annotations

import re

import pytest

from ferry.broker.server.authorizer_config import AuthorizerConfig
from ferry.broker.server.broker_config import BrokerConfig, ConfigError

REQUIRED = {"broker.id": "1", "listeners": "127.0.0.1:9092", "log.dirs": "/tmp/d", "zookeeper.connect": "z:1/c",
            "datacenter": "live"}


def test_off_unless_asked():
    cfg = BrokerConfig.from_properties(REQUIRED).authorizer
    assert cfg == AuthorizerConfig() and not cfg.enabled
    assert (cfg.super_users, cfg.allow_everyone_if_no_acl_found) == ((), False)


@pytest.mark.parametrize("name", ["ferry", "kafka.security.authorizer.AclAuthorizer",
                                  "kafka.security.auth.SimpleAclAuthorizer"])
def test_the_settings_from_a_brokers_properties(name):
    cfg = BrokerConfig.from_properties({**REQUIRED, "authorizer.class.name": name,
                                        "super.users": " User:admin; User:broker ;",
                                        "allow.everyone.if.no.acl.found": "yes"}).authorizer
    assert cfg.enabled and cfg.class_name == name
    assert cfg.super_users == ("User:admin", "User:broker") and cfg.allow_everyone_if_no_acl_found is True


@pytest.mark.parametrize("key, value, message", [
    ("authorizer.class.name", "com.example.Nope", "authorizer.class.name: 'com.example.Nope' is not an authorizer"),
    ("super.users", "User:admin;broker", "super.users: 'broker' is not TYPE:NAME"),
    ("super.users", "User:", "super.users: 'User:' is not TYPE:NAME"),
    ("allow.everyone.if.no.acl.found", "sometimes", "allow.everyone.if.no.acl.found: expected true or false"),
])
def test_a_bad_value_names_its_setting(key, value, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        BrokerConfig.from_properties({**REQUIRED, key: value})
