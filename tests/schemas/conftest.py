"""The schema tests' shared fixture: one `ferry schemas serve` process (a real server over a real ZooKeeper
chroot) per test module that asks for it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.schemas.registry_http import serve_registry


@pytest.fixture(scope="module")
def registry_zk(zk_server) -> str:
    return f"{zk_server.connect}/t/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def registry_url(registry_zk: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_registry(registry_zk, tmp_path_factory.mktemp("serve") / "serve.out") as url:
        yield url
