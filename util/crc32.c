#include "util/crc32.h"

// The table of CRCs of every byte value, built on first use.
static const uint32_t *crc32_table(void) {
    static uint32_t table[256];
    static int built;
    if (!built) {
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t c = b;
            for (int bit = 0; bit < 8; bit++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
            table[b] = c;
        }
        built = 1;
    }
    return table;
}

uint32_t crc32_update(uint32_t crc, const void *data, size_t len) {
    const uint32_t *table = crc32_table();
    const unsigned char *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}
