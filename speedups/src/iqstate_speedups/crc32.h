/*
 * CRC-32 (zlib's: the IEEE 802.3 polynomial, reflected), with the CPU's carry-less
 * multiply where it has one. The values are zlib's crc32's, so stored checksums do not
 * change with the machine that computed them.
 */
#ifndef IQSTATE_CRC32_H
#define IQSTATE_CRC32_H

#include <stddef.h>

/* Choose the implementation for this CPU; call once before crc32_update. */
void crc32_choose(void);

/* zlib's crc32(crc, data, size). */
unsigned long crc32_update(unsigned long crc, const unsigned char *data, size_t size);

/* Which implementation crc32_choose chose: "pclmul" or "zlib". */
const char *crc32_implementation(void);

#endif
