# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""CRC-32C for ferry's Python code, from wire/record/batch_bytes.h (built by scripts/build_native.py; record_batch
uses the ``crc32c`` package when this is not built).

Why not the package: it runs one crc32 stream (batch_bytes.h runs three at once, about twice as fast on a
megabyte), and it releases the interpreter lock on buffers over 32 KiB. A broker checking the mirror's
megabyte batches then handed the lock to its flusher threads and waited to get it back, a context switch
per batch. This one keeps the lock: the CRC of a megabyte takes well under a millisecond.
"""

from libc.stdint cimport uint8_t, uint32_t

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from batch_bytes cimport ferry_crc32c_update, ferry_crc_init  # wire/record/batch_bytes.h

ferry_crc_init()


def crc32c(data, uint32_t crc=0) -> int:
    """The CRC-32C of ``data`` (any buffer), continuing ``crc`` (the CRC of what came before), as
    ``crc32c.crc32c(data, crc)`` computes it."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return ferry_crc32c_update(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
