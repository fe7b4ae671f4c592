"""ZkConnect parsing: the accepted forms and a clear error for each malformed one."""

from __future__ import annotations

import pytest

from ferry.zk import InvalidZkConnectError, ZkConnect


@pytest.mark.parametrize(
    ("text", "hosts", "chroot"),
    [
        ("127.0.0.1:2181/ferry/live", "127.0.0.1:2181", "/ferry/live"),
        ("127.0.0.1:2181", "127.0.0.1:2181", ""),
        ("127.0.0.1:2181/", "127.0.0.1:2181", ""),
        ("zk1:2181,zk2:2182,zk3/ferry", "zk1:2181,zk2:2182,zk3:2181", "/ferry"),
        (" zk-a.example.com:2181 /x", "zk-a.example.com:2181", "/x"),
        ("[::1]:2181/ferry/offline", "[::1]:2181", "/ferry/offline"),
    ],
)
def test_parse_accepts(text: str, hosts: str, chroot: str) -> None:
    zk = ZkConnect.parse(text)
    assert (zk.hosts, zk.chroot) == (hosts, chroot)
    assert str(zk) == hosts + chroot
    assert ZkConnect.parse(str(zk)) == zk


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("/ferry/live", "no host"),
        ("127.0.0.1:abc/ferry", "not a number"),
        ("127.0.0.1:70000/ferry", "out of range"),
        ("127.0.0.1:/ferry", "missing port"),
        ("127.0.0.1:2181,,h2:2181/ferry", "empty host"),
        ("127.0.0.1:2181/ferry/", "must not end"),
        ("127.0.0.1:2181/ferry//live", "empty path element"),
        ("127.0.0.1:2181/ferry/../x", "'.' or '..'"),
        ("h1:2181/ferry,h2:2181", "after ALL hosts"),
        ("h 1:2181/ferry", "bad host"),
        ("::1:2181/ferry", "IPv6"),
    ],
)
def test_parse_refuses(text: str, fragment: str) -> None:
    with pytest.raises(InvalidZkConnectError, match=None) as info:
        ZkConnect.parse(text)
    assert fragment in str(info.value)
    assert isinstance(info.value, ValueError)


def test_host_list_and_child() -> None:
    zk = ZkConnect.parse("a:1,[::1]:2/root")
    assert zk.host_list == [("a", 1), ("::1", 2)]
    assert zk.child("sub/x").chroot == "/root/sub/x"
