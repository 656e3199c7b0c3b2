#include "util/errors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Who reports a fatal error: set once by the communication layer, read by
// fatal() wherever it is called from, which is why it is a global.
static void (*fatal_reporter)(const char *message);

void fatal_set_reporter(void (*reporter)(const char *message)) { fatal_reporter = reporter; }

// The PATH.tmp a replace (replace_begin) is writing, "" when none: a fatal error removes it, so that a
// full disk or a failed write leaves PATH as it was and nothing beside it. One process writes one at a time.
static char replacing[4200];

// The whole line goes out in one write: under mpirun every rank shares the
// terminal, and piecewise writes from several ranks interleave mid-line.
void error_print(const char *text) {
    char line[8400];
    int n = snprintf(line, sizeof line, "shardlab: %s", text);
    size_t len = n < 0 ? 0 : (size_t)n;
    if (len > sizeof line - 2) len = sizeof line - 2;  // a truncated message still ends its line
    line[len++] = '\n';
    fflush(stdout);
    for (size_t done = 0; done < len;) {
        ssize_t w = write(STDERR_FILENO, line + done, len - done);
        if (w <= 0 && errno != EINTR) break;  // nowhere left to report to
        if (w > 0) done += (size_t)w;
    }
}

static void format_message(char *message, size_t size, const char *where, const char *fmt, va_list ap) {
    int n = snprintf(message, size, "%s", where);
    if (n < 0 || (size_t)n >= size) n = 0;
    vsnprintf(message + n, size - (size_t)n, fmt, ap);
}

static void __attribute__((noreturn)) report_and_exit(const char *message) {
    if (replacing[0]) unlink(replacing);
    if (fatal_reporter) fatal_reporter(message);
    error_print(message);
    exit(1);
}

void fatal(const char *fmt, ...) {
    char message[8192];
    va_list ap;
    va_start(ap, fmt);
    format_message(message, sizeof message, "", fmt, ap);
    va_end(ap);
    report_and_exit(message);
}

void fatal_at(const char *file, int line, const char *fmt, ...) {
    char where[512], message[8192];
    snprintf(where, sizeof where, "%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    format_message(message, sizeof message, where, fmt, ap);
    va_end(ap);
    report_and_exit(message);
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
    if (!p) fatal("out of memory allocating %.3f GB (%zu bytes)", bytes / 1e9, bytes);
    return p;
}

void *xcalloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) fatal("out of memory allocating %.3f GB (%zu x %zu bytes)", (double)count * size / 1e9, count, size);
    return p;
}

void *xrealloc(void *ptr, size_t bytes) {
    void *p = realloc(ptr, bytes ? bytes : 1);
    if (!p) fatal("out of memory growing a buffer to %.3f GB (%zu bytes)", bytes / 1e9, bytes);
    return p;
}

const char *file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "not a plain file";
}

int same_file_stat(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

// Files are read whole or by offset, so they must be regular files. O_NONBLOCK
// keeps open() from waiting for a writer when the path is a FIFO; fstat then
// tells what it is before any read.
static FILE *open_regular_for_reading(const char *path, const char *mode) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fatal("%s: cannot open for reading: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) fatal("%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) fatal("%s: not a regular file (%s)", path, file_kind(st.st_mode));
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
        fatal("%s: cannot set blocking reads: %s", path, strerror(errno));
    FILE *f = fdopen(fd, mode);
    if (!f) fatal("%s: cannot open for reading: %s", path, strerror(errno));
    return f;
}

FILE *xfopen(const char *path, const char *mode) {
    if (mode[0] == 'r' && !strchr(mode, '+')) return open_regular_for_reading(path, mode);
    struct stat st;  // opening a FIFO for writing would wait for a reader
    if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) fatal("%s: not a regular file (a FIFO)", path);
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

FILE *replace_begin(const char *path, char *tmp_path, size_t tmp_size) {
    xsnprintf(tmp_path, tmp_size, "%s.tmp", path);
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) fatal("%s: not a regular file (%s)", path, file_kind(st.st_mode));
    FILE *f = xfopen(tmp_path, "wb");
    xsnprintf(replacing, sizeof replacing, "%s", tmp_path);
    return f;
}

void replace_commit(FILE *f, const char *tmp_path, const char *path) {
    if (fflush(f) != 0) fatal("%s: write failed: %s", tmp_path, strerror(errno));
    if (fsync(fileno(f)) != 0) fatal("%s: fsync failed: %s", tmp_path, strerror(errno));
    xfclose(f, tmp_path);
    if (rename(tmp_path, path) != 0) fatal("%s: cannot rename to %s: %s", tmp_path, path, strerror(errno));
    replacing[0] = '\0';
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
