/* Reading a v2 record batch's bytes in C, for ferry's Cython modules (setup.py puts this
   folder on their include path): big-endian fields and CRC-32C (Castagnoli, reflected, as Kafka's batches
   carry it; the `crc32c` package computes the same, and the tests compare).

   Why here and not the `crc32c` package: the mirror checks the CRC of every fetched batch (~12 KB for a
   producer's 50 messages), and a Python call per batch (a memoryview slice, argument parsing) cost more
   than the CRC itself; C callers call this directly. The CRC runs the CPU's crc32 instruction (SSE 4.2)
   on three interleaved streams of FERRY_CRC_BLOCK bytes, so three crc32s are in flight at once instead of
   one waiting on the last (its latency is three cycles), and joins them by multiplying modulo the
   polynomial (four table lookups: a multiplication loop with its branches cost a third more than the
   CRC of the block); without SSE 4.2 it runs a table. */
#ifndef FERRY_BATCH_BYTES_H
#define FERRY_BATCH_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define FERRY_CRC_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define FERRY_CRC_BLOCK 256 /* bytes per stream per step: streams this close scanned an 8 MB answer twice as fast as 2048 apart */

static inline int32_t ferry_be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

static inline int64_t ferry_be64(const uint8_t *p) {
    return (int64_t)(((uint64_t)(uint32_t)ferry_be32(p) << 32) | (uint32_t)ferry_be32(p + 4));
}

static uint32_t ferry_crc_table[256];
static uint32_t ferry_crc_shift_table[4][256]; /* c -> c * x^(8 * FERRY_CRC_BLOCK), one table per byte of c */
static int ferry_crc_hw = -1;                  /* 1: SSE 4.2; set by ferry_crc_init */

/* a * b modulo the polynomial, both reflected (bit 31 is x^0) */
static inline uint32_t ferry_crc_multiply(uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (int i = 0; i < 32; i++) {
        if (a & 0x80000000u) product ^= b;
        a <<= 1;
        b = (b & 1) ? (b >> 1) ^ FERRY_CRC_POLY : b >> 1;
    }
    return product;
}

/* x^(8n) modulo the polynomial: what n zero bytes do to a CRC register */
static inline uint32_t ferry_crc_zeros(size_t n) {
    uint32_t result = 0x80000000u, square = 0x00800000u; /* x^0, x^8 */
    while (n) {
        if (n & 1) result = ferry_crc_multiply(result, square);
        square = ferry_crc_multiply(square, square);
        n >>= 1;
    }
    return result;
}

static inline void ferry_crc_init(void) {
    if (ferry_crc_hw >= 0) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ FERRY_CRC_POLY : c >> 1;
        ferry_crc_table[i] = c;
    }
    uint32_t shift = ferry_crc_zeros(FERRY_CRC_BLOCK);
    for (int j = 0; j < 4; j++)
        for (uint32_t v = 0; v < 256; v++) ferry_crc_shift_table[j][v] = ferry_crc_multiply(v << (8 * j), shift);
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    ferry_crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    ferry_crc_hw = 0;
#endif
}

/* c * x^(8 * FERRY_CRC_BLOCK): the product is linear in c, so four lookups, one per byte */
static inline uint32_t ferry_crc_shift_block(uint32_t c) {
    return ferry_crc_shift_table[0][c & 0xFF] ^ ferry_crc_shift_table[1][(c >> 8) & 0xFF]
           ^ ferry_crc_shift_table[2][(c >> 16) & 0xFF] ^ ferry_crc_shift_table[3][c >> 24];
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2")))
static inline uint32_t ferry_crc_sse42(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c0 = crc;
    while (n >= 3 * FERRY_CRC_BLOCK) {
        uint64_t c1 = 0, c2 = 0, v0, v1, v2;
        const uint8_t *end = p + FERRY_CRC_BLOCK;
        do {
            memcpy(&v0, p, 8);
            memcpy(&v1, p + FERRY_CRC_BLOCK, 8);
            memcpy(&v2, p + 2 * FERRY_CRC_BLOCK, 8);
            c0 = __builtin_ia32_crc32di(c0, v0);
            c1 = __builtin_ia32_crc32di(c1, v1);
            c2 = __builtin_ia32_crc32di(c2, v2);
            p += 8;
        } while (p < end);
        /* the register after A is c0; after A B it is c0 * x^(8L) + c1; after A B C likewise */
        c0 = ferry_crc_shift_block((uint32_t)c0) ^ (uint32_t)c1;
        c0 = ferry_crc_shift_block((uint32_t)c0) ^ (uint32_t)c2;
        p += 2 * FERRY_CRC_BLOCK;
        n -= 3 * FERRY_CRC_BLOCK;
    }
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c0 = __builtin_ia32_crc32di(c0, v);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)c0;
    while (n--) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}
#endif

/* ferry_crc32c_update by the table, on any CPU (the tests hold it to the same answers) */
static inline uint32_t ferry_crc32c_table_update(uint32_t crc, const uint8_t *p, size_t n) {
    crc ^= 0xFFFFFFFFu;
    while (n--) crc = ferry_crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc ^ 0xFFFFFFFFu;
}

/* the CRC-32C of what `crc` is the CRC-32C of, followed by p[0:n] (ferry_crc32c_update(0, p, n) is the CRC of
   p[0:n]); call ferry_crc_init() once first */
static inline uint32_t ferry_crc32c_update(uint32_t crc, const uint8_t *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (ferry_crc_hw == 1) return ferry_crc_sse42(crc ^ 0xFFFFFFFFu, p, n) ^ 0xFFFFFFFFu;
#endif
    return ferry_crc32c_table_update(crc, p, n);
}

/* CRC-32C of p[0:n]; call ferry_crc_init() once first */
static inline uint32_t ferry_crc32c(const uint8_t *p, size_t n) {
    return ferry_crc32c_update(0, p, n);
}

/* the CRC-32C of A followed by B from crc_a and crc_b (B being n bytes long), without reading either: A's
   CRC moved past n bytes (times x^(8n)) plus B's; the init and final xors cancel out. The concatenation
   uses it to CRC the records as it writes them (in the cache) though the header before them comes last. */
static inline uint32_t ferry_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t n) {
    return ferry_crc_multiply(crc_a, ferry_crc_zeros(n)) ^ crc_b;
}

#endif
