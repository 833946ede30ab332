/*
 * CRC-32 by folding 16 bytes at a time with carry-less multiplication (PCLMULQDQ), after
 * Gopal et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction" (Intel, 2009): a 128-bit remainder is folded into the next 16 bytes by
 * multiplying its halves by x^(128+32) and x^(128-32) mod P, then reduced to 32 bits with
 * two more folds and a Barrett reduction. From 128 bytes, four such remainders 64 bytes
 * apart are folded side by side (by x^(512+32) and x^(512-32) mod P), then into one. The
 * constants are those powers of x, reflected, for zlib's polynomial. Lengths that are not a multiple of 16, short inputs and CPUs
 * without the instruction go to zlib's crc32, which continues from the folded value.
 */
#include <stdint.h>
#include <zlib.h>

#include "crc32.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CLMUL_PATH 1
#include <immintrin.h>

/* The fold takes whole 16-byte blocks; shorter inputs are zlib's. */
#define CLMUL_MIN 16

static int use_clmul = 0;

/* The CRC register (not inverted) after `size` bytes, `size` a multiple of 16, >= 16. */
__attribute__((target("pclmul"))) static uint32_t
fold(uint32_t state, const unsigned char *data, size_t size)
{
    /* x^(128+32) and x^(128-32) mod P (low, high), x^64 mod P, then P and floor(x^64 / P). */
    const __m128i by_128 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);
    const __m128i by_32 = _mm_set_epi64x(0, 0x163cd6124);
    const __m128i barrett = _mm_set_epi64x(0x1f7011641, 0x1db710641);
    const __m128i low_32 = _mm_set_epi32(0, 0, 0, -1);

    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)data),
                              _mm_cvtsi32_si128((int)state));
    size_t at = 16;
    if (size >= 128) {
        /* Four lanes 64 bytes apart, each folded by x^(4*128+32) and x^(4*128-32) mod P:
         * four independent multiplies in flight instead of one waiting on the last. */
        const __m128i by_512 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);
        __m128i lanes[4] = {x, _mm_loadu_si128((const __m128i *)(data + 16)),
                            _mm_loadu_si128((const __m128i *)(data + 32)),
                            _mm_loadu_si128((const __m128i *)(data + 48))};
        for (at = 64; at + 64 <= size; at += 64) {
            for (int lane = 0; lane < 4; lane++) {
                __m128i low = _mm_clmulepi64_si128(lanes[lane], by_512, 0x00);
                __m128i high = _mm_clmulepi64_si128(lanes[lane], by_512, 0x11);
                lanes[lane] = _mm_xor_si128(
                    _mm_xor_si128(low, high),
                    _mm_loadu_si128((const __m128i *)(data + at + 16 * lane)));
            }
        }
        /* the four lanes into one, 128 bits at a time */
        x = lanes[0];
        for (int lane = 1; lane < 4; lane++) {
            __m128i low = _mm_clmulepi64_si128(x, by_128, 0x00);
            __m128i high = _mm_clmulepi64_si128(x, by_128, 0x11);
            x = _mm_xor_si128(_mm_xor_si128(low, high), lanes[lane]);
        }
    }
    for (; at < size; at += 16) {
        __m128i low = _mm_clmulepi64_si128(x, by_128, 0x00);
        __m128i high = _mm_clmulepi64_si128(x, by_128, 0x11);
        x = _mm_xor_si128(_mm_xor_si128(low, high),
                          _mm_loadu_si128((const __m128i *)(data + at)));
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
    use_clmul = __builtin_cpu_supports("pclmul");
#endif
}

const char *
crc32_implementation(void)
{
#ifdef CLMUL_PATH
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
        size_t folded = size & ~(size_t)15;
        crc = fold((uint32_t)crc ^ 0xffffffffU, data, folded) ^ 0xffffffffU;
        data += folded;
        size -= folded;
    }
#endif
    return crc32_z(crc, data, (z_size_t)size);
}
