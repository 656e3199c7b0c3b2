#include "errors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

void fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("shardlab: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stdout);
    exit(1);
}

void fatal_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "shardlab: %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stdout);
    exit(1);
}

void xsnprintf(char *out, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, size, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size) fatal("path too long: %.60s...", out);
}

void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) fatal("out of memory allocating %zu bytes", bytes);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

FILE *xfopen(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) fatal("%s: cannot open for %s: %s", path, mode[0] == 'r' ? "reading" : "writing",
                  strerror(errno));
    return f;
}

void xfread(void *dst, size_t size, size_t count, FILE *f, const char *path) {
    size_t got = fread(dst, size, count, f);
    if (got != count)
        fatal("%s: truncated file (wanted %zu items of %zu bytes, got %zu)", path, count, size, got);
}

void xfwrite(const void *src, size_t size, size_t count, FILE *f, const char *path) {
    if (fwrite(src, size, count, f) != count) fatal("%s: write failed: %s", path, strerror(errno));
}

void xfclose(FILE *f, const char *path) {
    if (fclose(f) != 0) fatal("%s: close failed: %s", path, strerror(errno));
}

char *xread_file(const char *path, size_t *len) {
    FILE *f = xfopen(path, "rb");
    long size = xfsize(f, path);
    char *buf = xmalloc((size_t)size + 1);
    xfread(buf, 1, (size_t)size, f, path);
    fclose(f);
    buf[size] = '\0';
    *len = (size_t)size;
    return buf;
}

long xfsize(FILE *f, const char *path) {
    long here = ftell(f);
    if (here < 0 || fseek(f, 0, SEEK_END) != 0) fatal("%s: cannot seek", path);
    long size = ftell(f);
    if (size < 0 || fseek(f, here, SEEK_SET) != 0) fatal("%s: cannot seek", path);
    return size;
}
