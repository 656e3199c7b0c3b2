// crc32.h: CRC-32 (the zlib/PNG polynomial), to detect corrupted checkpoint bytes.
#ifndef SHARDLAB_CRC32_H
#define SHARDLAB_CRC32_H

#include <stddef.h>
#include <stdint.h>

// Continues a CRC over more bytes; start with crc = 0.
uint32_t crc32_update(uint32_t crc, const void *data, size_t len);

#endif
