# The declarations of batch_bytes.h for ferry's Cython modules (``from batch_bytes cimport ...``;
# setup.py puts wire/record on their include path). A module that uses the CRC calls
# ferry_crc_init() once when it loads.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t


cdef extern from "batch_bytes.h":
    void ferry_crc_init()
    uint32_t ferry_crc32c(const uint8_t *p, size_t n)
    uint32_t ferry_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) nogil
    uint32_t ferry_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t n)
    uint32_t ferry_crc32c_table_update(uint32_t crc, const uint8_t *p, size_t n)
    int ferry_crc_hw
    int32_t ferry_be32(const uint8_t *p) nogil
    int64_t ferry_be64(const uint8_t *p) nogil
