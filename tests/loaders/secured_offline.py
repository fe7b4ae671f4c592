"""A secured offline cluster as the loads meet it (the secure-load and secure-DAG tests): the authorizer with `ops`
as the only super user, so an anonymous (PLAINTEXT) client may do nothing; the `loader` user with least privilege
(Read on the topics of a prefix, Read and Write on `_audit`, IdempotentWrite for its audit producer); `_audit`
created."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from acl_helpers import binding, grant  # noqa: E402
from secure_cluster import SecureCluster, add_user, start_secure_cluster  # noqa: E402

from ferry.wire.protocol.acl_types import AclOperation, PatternType, ResourceType  # noqa: E402
from ferry.zk import ClusterRegistry  # noqa: E402

AUTHZ = "authorizer.class.name=ferry\nsuper.users=User:ops\n"


def start_loader_cluster(zk_server_connect: str, root: Path, topic_prefix: str, ops_password: str,
                         loader_password: str) -> SecureCluster:
    """The offline cluster started and provisioned (the caller stops it); the loader reads `topic_prefix*`."""
    cluster = start_secure_cluster(zk_server_connect, root, "offline", extra_props=AUTHZ)
    try:
        add_user(cluster.zk, "ops", ops_password)
        add_user(cluster.zk, "loader", loader_password)
        user = "User:loader"
        grant(cluster.zk, binding(ResourceType.TOPIC, topic_prefix, AclOperation.READ, principal=user,
                                  pattern=PatternType.PREFIXED),
              binding(ResourceType.TOPIC, "_audit", AclOperation.READ, principal=user),
              binding(ResourceType.TOPIC, "_audit", AclOperation.WRITE, principal=user),
              binding(ResourceType.CLUSTER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE, principal=user))
        with ClusterRegistry(cluster.zk) as reg:
            reg.create_topic("_audit", 1)
    except BaseException:
        cluster.stop()
        raise
    return cluster
