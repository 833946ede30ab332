/*
 * CRC-32 by folding 16 bytes at a time with carry-less multiplication (PCLMULQDQ), after
 * Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009): a 128-bit remainder is folded into the next 16 bytes by
 * multiplying its halves by x^(128+32) and x^(128-32) mod P, then reduced to 32 bits with
 * two more folds and a Barrett reduction. From 128 bytes, four such remainders 64 bytes
 * apart are folded side by side (by x^(512+32) and x^(512-32) mod P), then into one; from
 * 256 bytes, where the CPU multiplies 512 bits at once (VPCLMULQDQ), two 64-byte
 * accumulators 128 bytes apart (by x^(1024+32) and x^(1024-32) mod P). The constants are
 * those powers of x, reflected, for zlib's polynomial. A last block shorter than 16 bytes
 * is folded with the remainder's bytes it displaces; inputs shorter than 16 bytes and CPUs
 * without the instruction go to zlib's crc32.
 */
#include <stdint.h>
#include <zlib.h>

#include "crc32.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLMUL_PATH 1
#include <immintrin.h>

/* The fold needs one whole 16-byte block; shorter inputs are zlib's. */
#define CLMUL_MIN 16

static int use_clmul = 0;

static int use_wide = 0;

/* x^(128+32) and x^(128-32) mod P (low, high): one 16-byte block into the next. */
#define BY_128_LOW 0x1751997d0
#define BY_128_HIGH 0x0ccaa009e
/* the same 64 bytes ahead (x^(512+32), x^(512-32)) and 128 bytes ahead */
#define BY_512_LOW 0x154442bd4
#define BY_512_HIGH 0x1c6e41596
#define BY_1024_LOW 0x1e88ef372
#define BY_1024_HIGH 0x14a7fe880

/* One fold step: the remainder `x` multiplied by `by`'s two powers of x (its low and high
 * halves, each the distance folded plus and minus 32), into the bytes `next`. */
__attribute__((target("pclmul"))) static inline __m128i
fold_into(__m128i x, __m128i by, __m128i next)
{
    return _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(x, by, 0x00), _mm_clmulepi64_si128(x, by, 0x11)),
        next);
}

/* fold_into for four 16-byte lanes at once. */
__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i
fold_into_wide(__m512i x, __m512i by, __m512i next)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, by, 0x00),
                                     _mm512_clmulepi64_epi128(x, by, 0x11), next, 0x96);
}

/* With 512-bit carry-less multiply (VPCLMULQDQ): two accumulators of four 16-byte lanes,
 * 128 bytes folded a round in four multiplies where the 128-bit path takes sixteen, then
 * the accumulators and lanes into one remainder. `size` >= 256; the bytes folded (a
 * multiple of 64) in `*folded`. */
__attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul"))) static __m128i
fold_wide(uint32_t state, const unsigned char *data, size_t size, size_t *folded)
{
    const __m512i by_1024 = _mm512_broadcast_i32x4(_mm_set_epi64x(BY_1024_HIGH, BY_1024_LOW));
    const __m512i by_512 = _mm512_broadcast_i32x4(_mm_set_epi64x(BY_512_HIGH, BY_512_LOW));
    const __m128i by_128 = _mm_set_epi64x(BY_128_HIGH, BY_128_LOW);
    __m512i first = _mm512_xor_si512(_mm512_loadu_si512((const void *)data),
                                     _mm512_castsi128_si512(_mm_cvtsi32_si128((int)state)));
    __m512i second = _mm512_loadu_si512((const void *)(data + 64));
    size_t at = 128;
    for (; at + 128 <= size; at += 128) {
        first = fold_into_wide(first, by_1024, _mm512_loadu_si512((const void *)(data + at)));
        second =
            fold_into_wide(second, by_1024, _mm512_loadu_si512((const void *)(data + at + 64)));
    }
    /* the first accumulator 64 bytes on, into the second */
    first = fold_into_wide(first, by_512, second);
    if (at + 64 <= size) {
        first = fold_into_wide(first, by_512, _mm512_loadu_si512((const void *)(data + at)));
        at += 64;
    }
    /* its four lanes into one, 128 bits at a time */
    __m128i x = _mm512_extracti32x4_epi32(first, 0);
    __m128i lanes[3] = {_mm512_extracti32x4_epi32(first, 1), _mm512_extracti32x4_epi32(first, 2),
                        _mm512_extracti32x4_epi32(first, 3)};
    for (int lane = 0; lane < 3; lane++) {
        x = fold_into(x, by_128, lanes[lane]);
    }
    *folded = at;
    return x;
}

/* Shuffles moving a register's bytes `n` places up (`to_end + n`) or down (`to_start + n`),
 * zeros shifted in, and the mask of its last `n` bytes (`last_bytes + n`), 0 < n < 16. */
static const unsigned char to_end[32] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f};
static const unsigned char to_start[32] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};
static const unsigned char last_bytes[32] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

/* The CRC register (not inverted) after `size` bytes, `size` >= 16. */
__attribute__((target("pclmul,ssse3"))) static uint32_t
fold(uint32_t state, const unsigned char *data, size_t size)
{
    /* x^(128+32) and x^(128-32) mod P (low, high), x^64 mod P, then P and floor(x^64 / P). */
    const __m128i by_128 = _mm_set_epi64x(BY_128_HIGH, BY_128_LOW);
    const __m128i by_32 = _mm_set_epi64x(0, 0x163cd6124);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low_32 = _mm_set_epi32(0, 0, 0, -1);

    __m128i x;
    size_t at = 16;
    if (use_wide && size >= 256) {
        x = fold_wide(state, data, size, &at);
    }
    else {
        x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)data), _mm_cvtsi32_si128((int)state));
    }
    if (at == 16 && size >= 128) {
        /* Four lanes 64 bytes apart, each folded by x^(4*128+32) and x^(4*128-32) mod P:
         * four independent multiplies in flight instead of one waiting on the last. */
        const __m128i by_512 = _mm_set_epi64x(BY_512_HIGH, BY_512_LOW);
        __m128i lanes[4] = {x, _mm_loadu_si128((const __m128i *)(data + 16)),
                            _mm_loadu_si128((const __m128i *)(data + 32)),
                            _mm_loadu_si128((const __m128i *)(data + 48))};
        for (at = 64; at + 64 <= size; at += 64) {
            for (int lane = 0; lane < 4; lane++) {
                lanes[lane] = fold_into(lanes[lane], by_512,
                                        _mm_loadu_si128((const __m128i *)(data + at + 16 * lane)));
            }
        }
        /* the four lanes into one, 128 bits at a time */
        x = lanes[0];
        for (int lane = 1; lane < 4; lane++) {
            x = fold_into(x, by_128, lanes[lane]);
        }
    }
    for (; at + 16 <= size; at += 16) {
        x = fold_into(x, by_128, _mm_loadu_si128((const __m128i *)(data + at)));
    }
    size_t rest = size - at;
    if (rest) {
        /* The last `rest` bytes: the remainder's first `rest` bytes now lie before the
         * final 16 and are folded on; its others and the tail make the final 16 (byte
         * shifts by table-driven shuffles, the tail from the input's last 16 bytes). */
        __m128i before = _mm_shuffle_epi8(x, _mm_loadu_si128((const __m128i *)(to_end + rest)));
        __m128i kept = _mm_shuffle_epi8(x, _mm_loadu_si128((const __m128i *)(to_start + rest)));
        __m128i tail = _mm_and_si128(_mm_loadu_si128((const __m128i *)(data + size - 16)),
                                     _mm_loadu_si128((const __m128i *)(last_bytes + rest)));
        x = fold_into(before, by_128, _mm_or_si128(kept, tail));
    }
    /* 128 bits to 96, then to 64 */
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, by_128, 0x10));
    x = _mm_xor_si128(_mm_srli_si128(x, 4),
                      _mm_clmulepi64_si128(_mm_and_si128(x, low_32), by_32, 0x00));
    /* Barrett: the quotient's low 32 bits times P cancel all but the remainder */
    __m128i quotient =
        _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x, low_32), barrett, 0x10), low_32);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(quotient, barrett, 0x00));
    return (uint32_t)_mm_cvtsi128_si32(_mm_srli_si128(x, 4));
}
#endif

void
crc32_choose(void)
{
#ifdef CLMUL_PATH
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("ssse3");
    use_wide = use_clmul && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
#endif
}

const char *
crc32_implementation(void)
{
#ifdef CLMUL_PATH
    if (use_wide) {
        return "vpclmul";
    }
    if (use_clmul) {
        return "pclmul";
    }
#endif
    return "zlib";
}

unsigned long
crc32_update(unsigned long crc, const unsigned char *data, size_t size)
{
#ifdef CLMUL_PATH
    if (use_clmul && size >= CLMUL_MIN) {
        return fold((uint32_t)crc ^ 0xffffffffU, data, size) ^ 0xffffffffU;
    }
#endif
    return crc32_z(crc, data, (z_size_t)size);
}
