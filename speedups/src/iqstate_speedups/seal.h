/*
 * iqstate.sealing's seal, for the extensions that write or check sealed values: a value is
 * stored followed by the CRC-32 of its key and value (SEAL_TAG bytes, little-endian), so
 * the CRC-32 of key, value and tag together is SEAL_RESIDUE and checking a record is one
 * CRC over what was read.
 */
#ifndef IQSTATE_SEAL_H
#define IQSTATE_SEAL_H

#include <stddef.h>

#include "crc32.h"

#define SEAL_RESIDUE 0x2144DF1CUL
#define SEAL_TAG 4

/* The CRC-32 of `first` then `second`, as if joined. */
static inline unsigned long
seal_crc(const void *first, size_t first_size, const void *second, size_t second_size)
{
    unsigned long crc = crc32_update(0UL, (const unsigned char *)first, first_size);
    return crc32_update(crc, (const unsigned char *)second, second_size);
}

/* Whether the value `stored` under `key` passes its seal. */
static inline int
seal_intact(const void *key, size_t key_size, const void *stored, size_t stored_size)
{
    return stored_size >= SEAL_TAG &&
           seal_crc(key, key_size, stored, stored_size) == SEAL_RESIDUE;
}

#endif
