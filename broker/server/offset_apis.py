"""ListOffsets (earliest, latest, by time; read_committed: up to the last stable offset) and InitProducerId for
idempotent producers (transactional ones: transaction_apis.py; FindCoordinator is group_apis.py)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ferry.wire.protocol import (
    init_producer_id,
    list_offsets,
)
from ferry.wire.protocol.errors import ErrorCode, error_code_of
from ferry.wire.protocol.header import RequestHeader
from ferry.wire.protocol.primitives import Reader

if TYPE_CHECKING:
    from ferry.broker.server.kafka_apis import Result

log = logging.getLogger("ferry.broker.server.kafka_apis")


class OffsetApis:
    """ListOffsets (earliest, latest, by time) and InitProducerId (a part of KafkaApis)."""

    # ------------------------------------------------------------------ ListOffsets
    def handle_list_offsets(self, header: RequestHeader, r: Reader) -> Result:
        version = header.api_version
        req = list_offsets.parse_request(r, version)
        committed = req.isolation_level == 1  # read_committed: nothing past the last stable offset
        out = []
        for topic, parts in req.topics:
            tres = []
            for partition, ts in parts:
                res = list_offsets.PartitionOffsetResult(partition)
                tres.append(res)
                lg, code = self.replicas.leader_log(topic, partition)
                if code:
                    res.error_code = code
                    continue
                try:
                    end = lg.last_stable_offset if committed else lg.high_watermark
                    if ts == list_offsets.EARLIEST_TIMESTAMP:
                        res.offset = lg.log_start_offset
                    elif ts == list_offsets.LATEST_TIMESTAMP:
                        res.offset = end
                    elif ts < 0:
                        res.error_code = ErrorCode.INVALID_REQUEST  # -3 (max timestamp) needs v7
                    else:
                        found = lg.offset_for_timestamp(ts, end)
                        if found is not None and found[0] < end:
                            res.offset, res.timestamp = found
                except Exception as e:
                    res.error_code = error_code_of(e)
                    log.exception("ListOffsets on %s-%d failed", topic, partition)
            out.append((topic, tres))
        return list_offsets.encode_response(version, out)

    # ------------------------------------------------------------------ InitProducerId
    def handle_init_producer_id(self, header: RequestHeader, r: Reader) -> Result:
        req = init_producer_id.parse_request(r, header.api_version)
        if req.transactional_id is not None:
            return init_producer_id.encode_response(header.api_version,
                                                    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        return self._init_producer_id(header.api_version)

    async def _init_producer_id(self, version: int) -> bytes:
        try:
            pid = await self.producer_ids.next_id()
        except Exception as e:
            log.error("cannot allocate a producer id: %s", e)
            return init_producer_id.encode_response(version, ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        return init_producer_id.encode_response(version, ErrorCode.NONE, pid, 0)
