// utf8.h: UTF-8 encoding and decoding of single code points.
#ifndef SHARDLAB_UTF8_H
#define SHARDLAB_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Decodes the code point at s[0..len); sets *cp and returns its byte length.
// An invalid or truncated sequence decodes as one byte with *cp = UTF8_INVALID.
#define UTF8_INVALID 0xFFFFFFFFu
int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp);
// Writes cp as UTF-8 into out (at least 4 bytes); returns the byte count.
int utf8_encode(uint32_t cp, char *out);

#endif
