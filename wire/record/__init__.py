"""RecordBatch v2 headers and the storage layer's errors."""
