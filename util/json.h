// json.h: a small cursor-based JSON reader, enough for GPT-2's encoder.json and
// JSON-lines test vectors. Each function skips leading whitespace, advances the
// cursor past what it read, and returns 0 on success or -1 on malformed input.
#ifndef SHARDLAB_JSON_H
#define SHARDLAB_JSON_H

#include <stddef.h>

typedef struct {
    const char *pos;
    const char *end;
} JsonCursor;

// Consumes the single character c (e.g. '{', ':', ',').
int json_expect(JsonCursor *cur, char c);
// Returns the next non-space character without consuming it ('\0' at the end).
char json_peek(JsonCursor *cur);
// Reads a string, decoding escapes (\uXXXX with surrogate pairs) into UTF-8.
// *out is malloc'ed and NUL-terminated; *len excludes the NUL.
int json_read_string(JsonCursor *cur, char **out, size_t *len);
int json_read_int(JsonCursor *cur, long *value);

#endif
