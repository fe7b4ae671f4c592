"""The paper's log: segments, sparse indexes, recovery, flush, retention, idempotence."""
