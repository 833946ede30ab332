/*
 * CRC-32 (zlib's: the IEEE 802.3 polynomial, reflected), with the CPU's carry-less
 * multiply where it has one. The values are zlib's crc32's, so stored checksums do not
 * change with the machine that computed them.
 */
#ifndef IQSTATE_CRC32_H
#define IQSTATE_CRC32_H

#include <stddef.h>

/* Shared between this extension's files only, never exported from its library. */
#if defined(__GNUC__) || defined(__clang__)
#define CRC32_INTERNAL __attribute__((visibility("hidden")))
#else
#define CRC32_INTERNAL
#endif

/* Choose the implementation for this CPU; call once before crc32_update. */
CRC32_INTERNAL void crc32_choose(void);

/* zlib's crc32(crc, data, size). */
CRC32_INTERNAL unsigned long crc32_update(unsigned long crc, const unsigned char *data,
                                          size_t size);

/* Which implementation crc32_choose chose: "vpclmul", "pclmul" or "zlib". */
CRC32_INTERNAL const char *crc32_implementation(void);

#endif
