# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Record batches written to a segment file natively (built by setup.py; log_append.py has the
pure-Python twin, the fallback): each batch's new 8- or 16-byte prefix (baseOffset, batchLength,
partitionLeaderEpoch) and the rest of it straight from the request's buffer, all of a burst's batches in one
pwritev, with no Python object made.

Why native: the Python write packed each prefix, sliced a memoryview and built a list for os.pwritev, a tenth of
the broker's CPU per one-message request. The syscall runs without the GIL, as os.pwritev's does.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.errno cimport EINTR, EIO, errno
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport strerror

cdef extern from "<sys/uio.h>" nogil:
    struct iovec:
        void *iov_base
        size_t iov_len
    ssize_t pwritev(int fd, const iovec *iov, int iovcnt, long offset)

DEF MAX_BATCHES = 512  # 1,024 iovecs: Linux's IOV_MAX


cdef inline void put_be(uint8_t *p, int64_t v, int n) noexcept nogil:
    cdef int i
    for i in range(n - 1, -1, -1):
        p[i] = <uint8_t>(v & 0xFF)
        v >>= 8


cdef int pwritev_all(int fd, iovec *cur, int left, int64_t position) noexcept nogil:
    """Write every byte of the ``left`` iovecs from ``cur`` at ``position`` (advancing them); 0 or the errno."""
    cdef ssize_t k
    while left > 0:
        k = pwritev(fd, cur, left, position)
        if k < 0:
            if errno == EINTR:
                continue
            return errno
        if k == 0:
            return EIO
        position += k
        while left > 0 and k >= <ssize_t>cur[0].iov_len:  # drop what was written whole
            k -= cur[0].iov_len
            cur += 1
            left -= 1
        if left > 0:  # the rest of a buffer written in part
            cur[0].iov_base = <uint8_t *>cur[0].iov_base + k
            cur[0].iov_len -= k
        while left > 0 and cur[0].iov_len == 0:
            cur += 1
            left -= 1
    return 0


def write_batches(int fd, list items, int32_t leader_epoch, int64_t position):
    """Write the batches ``items`` — (buffer, position in it, size, baseOffset, batchLength) each — one after the
    other at ``position`` of ``fd``, each with its baseOffset (and partitionLeaderEpoch ``leader_epoch`` when
    >= 0): all of it or OSError (the caller cuts a partial write off). At most 512 batches."""
    cdef Py_ssize_t n = len(items), i, got = 0, pos, size
    cdef Py_ssize_t n_prefix = 16 if leader_epoch >= 0 else 8
    cdef Py_buffer *views
    cdef uint8_t *prefixes
    cdef iovec *iov
    cdef int err = 0
    if n == 0:
        return
    if n > MAX_BATCHES:
        raise ValueError(f"{n} batches in one write; at most {MAX_BATCHES}")
    views = <Py_buffer *>malloc(n * sizeof(Py_buffer))
    prefixes = <uint8_t *>malloc(n * 16)
    iov = <iovec *>malloc(2 * n * sizeof(iovec))
    if views == NULL or prefixes == NULL or iov == NULL:
        free(views)
        free(prefixes)
        free(iov)
        raise MemoryError()
    try:
        for i in range(n):
            buf, pos, size, offset, batch_length = items[i]
            PyObject_GetBuffer(buf, &views[i], PyBUF_SIMPLE)
            got += 1
            if pos < 0 or size < n_prefix or pos + size > views[i].len:
                raise ValueError(f"batch of {size} bytes at {pos} is outside the {views[i].len}-byte buffer")
            put_be(prefixes + 16 * i, offset, 8)
            put_be(prefixes + 16 * i + 8, batch_length, 4)
            put_be(prefixes + 16 * i + 12, leader_epoch, 4)
            iov[2 * i].iov_base = prefixes + 16 * i
            iov[2 * i].iov_len = n_prefix
            iov[2 * i + 1].iov_base = <uint8_t *>views[i].buf + pos + n_prefix
            iov[2 * i + 1].iov_len = size - n_prefix
        with nogil:
            err = pwritev_all(fd, iov, <int>(2 * n), position)
        if err:
            raise OSError(err, strerror(err).decode())
    finally:
        for i in range(got):
            PyBuffer_Release(&views[i])
        free(views)
        free(prefixes)
        free(iov)


cdef inline int64_t get_be(const uint8_t *p, int n) noexcept nogil:
    cdef int64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


def write_run(int fd, buf, int64_t first_offset, int32_t leader_epoch, int64_t position):
    """Write the whole buffer ``buf`` of validated, consecutive batches at ``position`` of ``fd``, each batch with
    its baseOffset from ``first_offset`` on (and partitionLeaderEpoch ``leader_epoch`` when >= 0), ``buf`` left
    as it is: a payload of hundreds of batches (an embedded mirror's copied answer) without a Python object per
    batch, in pwritev calls of 512 batches. Returns the next offset; OSError (the caller cuts a partial write
    off), ValueError for a buffer that is not whole batches."""
    cdef Py_buffer view
    cdef const uint8_t *data
    cdef Py_ssize_t pos = 0, start = 0, size, n_prefix = 16 if leader_epoch >= 0 else 8, i
    cdef int64_t offset = first_offset, batch_length
    cdef uint8_t *prefixes = <uint8_t *>malloc(MAX_BATCHES * 16)
    cdef iovec *iov = <iovec *>malloc(2 * MAX_BATCHES * sizeof(iovec))
    cdef int err = 0, bad = 0
    if prefixes == NULL or iov == NULL:
        free(prefixes)
        free(iov)
        raise MemoryError()
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        data = <const uint8_t *>view.buf
        with nogil:
            while pos < view.len:  # the framing first: nothing is written for a buffer that is not whole batches
                if view.len - pos < 27 or get_be(data + pos + 8, 4) + 12 < 27 \
                        or get_be(data + pos + 8, 4) + 12 > view.len - pos:
                    bad = 1
                    break
                pos += get_be(data + pos + 8, 4) + 12
            start = pos = 0
            while pos < view.len and not bad and not err:
                i = 0
                while i < MAX_BATCHES and pos < view.len:
                    batch_length = get_be(data + pos + 8, 4)
                    size = batch_length + 12
                    put_be(prefixes + 16 * i, offset, 8)
                    put_be(prefixes + 16 * i + 8, batch_length, 4)
                    put_be(prefixes + 16 * i + 12, leader_epoch, 4)
                    iov[2 * i].iov_base = prefixes + 16 * i
                    iov[2 * i].iov_len = n_prefix
                    iov[2 * i + 1].iov_base = <void *>(data + pos + n_prefix)
                    iov[2 * i + 1].iov_len = size - n_prefix
                    offset += <int32_t>get_be(data + pos + 23, 4) + 1
                    pos += size
                    i += 1
                err = pwritev_all(fd, iov, <int>(2 * i), position + start)
                start = pos
        if bad:
            raise ValueError(f"the buffer is not whole record batches (at byte {pos})")
        if err:
            raise OSError(err, strerror(err).decode())
        return offset
    finally:
        PyBuffer_Release(&view)
        free(prefixes)
        free(iov)
