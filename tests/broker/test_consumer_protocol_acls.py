"""KIP-848 under ACLs: a topic asked for by id that the principal may not Describe is refused without its name
(Metadata v12), an unknown id is UNKNOWN_TOPIC_ID; ConsumerGroupHeartbeat needs Read on the group."""

from __future__ import annotations

import time
import uuid

import pytest
from acl_helpers import AUTHORIZER_ARGS
from broker_wire import METADATA, WireClient, start_brokers
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from ferry.wire.protocol import flexible
from ferry.wire.protocol.api_keys import ApiKey
from ferry.wire.protocol.errors import ErrorCode
from ferry.wire.protocol.primitives import Writer
from ferry.zk import ClusterRegistry
from tests.wire.flexible_oracle import flexible_roundtrip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def secured(zk_server, tmp_path_factory):
    """One broker with the authorizer on, no ACLs: ANONYMOUS may do nothing."""
    zk, brokers = start_brokers(zk_server.connect, tmp_path_factory.mktemp("acls848"), 1, extra_args=AUTHORIZER_ARGS)
    yield zk, brokers[0]
    brokers[0].stop()


def test_topic_by_id_refused_without_its_name_and_heartbeat_needs_read(secured):
    zk, broker = secured
    with ClusterRegistry(zk) as reg:
        topic_id = uuid.UUID(bytes=reg.create_topic("secret", 1, None, 1).topic_uuid)
    with WireClient(broker.bootstrap) as c:
        asked = MetadataRequest(version=12, topics=[MetadataRequest.MetadataRequestTopic(topic_id=topic_id, name=None),
                                                    MetadataRequest.MetadataRequestTopic(topic_id=uuid.uuid4(),
                                                                                         name=None)])
        deadline = time.monotonic() + 30
        while True:  # until the broker's metadata has the new topic (its ZooKeeper watch)
            r = c.request(METADATA, 12, b"\0" + bytes(asked.encode(version=12)))
            d = flexible_roundtrip(MetadataResponse, bytes(r.buf[r.pos:]), 12)
            if d.topics[0].error_code != ErrorCode.UNKNOWN_TOPIC_ID or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(t.error_code, t.name) for t in d.topics] == [(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None),
                                                             (ErrorCode.UNKNOWN_TOPIC_ID, None)]
        assert d.topics[0].topic_id == topic_id
        w = Writer()
        flexible.put_tagged_fields(w)
        for s in ("g-secret", "m1"):
            flexible.put_compact_string(w, s)
        w.int32(0)
        flexible.put_compact_string(w, None)
        flexible.put_compact_string(w, None)
        w.int32(-1)
        flexible.put_compact_array(w, ["secret"], flexible.put_compact_string)
        for _ in range(2):  # regex, server assignor
            flexible.put_compact_string(w, None)
        flexible.put_compact_array(w, None, lambda w, x: None)
        flexible.put_tagged_fields(w)
        r = c.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, bytes(w.buf))
        flexible.skip_tagged_fields(r)
        r.int32()
        assert r.int16() == ErrorCode.GROUP_AUTHORIZATION_FAILED
