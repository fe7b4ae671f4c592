# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""CRC-32C for ferry's Python code, from wire/record/batch_bytes.h (built by setup.py; record_batch
uses the ``crc32c`` package when this is not built).

Why not the package: it runs one crc32 stream where batch_bytes.h runs three at once (about twice as fast
on a megabyte), and it decides alone when to release the interpreter lock (on 32 KiB or more). Here the
caller decides: the broker lets its flusher threads run during a megabyte batch's CRC (record_batch); a
thread that would then wait to get the lock back keeps it (the mirror's scan, _forward_scan.pyx).
"""

from libc.stdint cimport uint8_t, uint32_t

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer

from batch_bytes cimport (  # wire/record/batch_bytes.h
    ferry_crc32c_table_update, ferry_crc32c_update, ferry_crc_hw, ferry_crc_init,
)

ferry_crc_init()


def crc32c(data, uint32_t crc=0, bint release_gil=False, bint hardware=True) -> int:
    """The CRC-32C of ``data`` (any buffer), continuing ``crc`` (the CRC of what came before), as
    ``crc32c.crc32c(data, crc)`` computes it; ``release_gil``: let other threads run meanwhile (on 32 KiB
    or more); ``hardware=False``: by the table, as on a CPU without SSE 4.2 (for the tests)."""
    cdef Py_buffer view
    cdef uint32_t out
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if not hardware:
            return ferry_crc32c_table_update(crc, <const uint8_t *>view.buf, <size_t>view.len)
        if release_gil and view.len >= 32768:
            with nogil:
                out = ferry_crc32c_update(crc, <const uint8_t *>view.buf, <size_t>view.len)
            return out
        return ferry_crc32c_update(crc, <const uint8_t *>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


def hardware_crc() -> bool:
    """True when the CRC-32C runs on the CPU's crc32 instruction (SSE 4.2)."""
    return ferry_crc_hw == 1
