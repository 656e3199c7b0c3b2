#include "util/json.h"

#include <stdint.h>
#include <stdlib.h>

#include "util/errors.h"
#include "util/utf8.h"

static void skip_space(JsonCursor *cur) {
    while (cur->pos < cur->end &&
           (*cur->pos == ' ' || *cur->pos == '\n' || *cur->pos == '\r' || *cur->pos == '\t'))
        cur->pos++;
}

char json_peek(JsonCursor *cur) {
    skip_space(cur);
    return cur->pos < cur->end ? *cur->pos : '\0';
}

int json_expect(JsonCursor *cur, char c) {
    if (json_peek(cur) != c) return -1;
    cur->pos++;
    return 0;
}

static int read_hex4(JsonCursor *cur, uint32_t *value) {
    if (cur->end - cur->pos < 4) return -1;
    *value = 0;
    for (int i = 0; i < 4; i++) {
        char c = *cur->pos++;
        int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (digit < 0) return -1;
        *value = *value * 16 + (uint32_t)digit;
    }
    return 0;
}

int json_read_string(JsonCursor *cur, char **out, size_t *len) {
    if (json_expect(cur, '"') != 0) return -1;
    // the decoded string is never longer than the escaped one
    const char *scan = cur->pos;
    while (scan < cur->end && *scan != '"') scan += (*scan == '\\') ? 2 : 1;
    if (scan >= cur->end) return -1;
    char *buf = xmalloc((size_t)(scan - cur->pos) + 1);
    size_t n = 0;
    while (*cur->pos != '"') {
        char c = *cur->pos++;
        if (c != '\\') { buf[n++] = c; continue; }
        char e = *cur->pos++;
        uint32_t cp;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u':
            if (read_hex4(cur, &cp) != 0) { free(buf); return -1; }
            if (cp >= 0xD800 && cp <= 0xDBFF) {  // high surrogate: a low one must follow
                uint32_t low;
                if (cur->end - cur->pos < 6 || cur->pos[0] != '\\' || cur->pos[1] != 'u') { free(buf); return -1; }
                cur->pos += 2;
                if (read_hex4(cur, &low) != 0 || low < 0xDC00 || low > 0xDFFF) { free(buf); return -1; }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            }
            n += (size_t)utf8_encode(cp, buf + n);
            break;
        default: free(buf); return -1;
        }
    }
    cur->pos++;  // closing quote
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

int json_read_int(JsonCursor *cur, long *value) {
    skip_space(cur);
    char *after;
    long v = strtol(cur->pos, &after, 10);
    if (after == cur->pos || after > cur->end) return -1;
    cur->pos = after;
    *value = v;
    return 0;
}
