// errors.h: one way to fail. Every library call that can fail is checked, and a
// failure prints "file:line: message" and ends the process with a non-zero code.
// Under MPI, ending one rank makes mpirun end the others, so no rank hangs.
#ifndef SHARDLAB_ERRORS_H
#define SHARDLAB_ERRORS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

// Prints "shardlab: <message>" to stderr and exits with status 1.
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Like fatal, with the source location in front (used by the CHECK macros).
void fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
// Under MPI every rank usually fails the same way at the same point: the
// communication layer installs a reporter (comm/fatal_once.c) that prints such
// an error once for the job. It receives the message without the "shardlab: "
// prefix and must not return. NULL: print here and exit (the default).
void fatal_set_reporter(void (*reporter)(const char *message));
// Writes "shardlab: <text>\n" to stderr in one write (a reporter's output).
void error_print(const char *text);

// Checked wrappers for the C library: they name the file or what was asked for.
void *xmalloc(size_t bytes);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t bytes);
// For reading ("r", "rb") the path must be a regular file: a directory, FIFO or
// device is refused by name, and opening a FIFO never waits for a writer.
FILE *xfopen(const char *path, const char *mode);
void xfread(void *dst, size_t size, size_t count, FILE *f, const char *path);
void xfwrite(const void *src, size_t size, size_t count, FILE *f, const char *path);
void xfclose(FILE *f, const char *path);
// A whole file written so that a failure never leaves it half-written or the old
// one destroyed: replace_begin opens PATH.tmp (tmp_path receives its name), and
// replace_commit syncs it and renames it over PATH; a fatal error in between removes PATH.tmp.
FILE *replace_begin(const char *path, char *tmp_path, size_t tmp_size);
void replace_commit(FILE *f, const char *tmp_path, const char *path);
// The whole file, NUL-terminated (malloc'ed); *len excludes the NUL.
char *xread_file(const char *path, size_t *len);
// Size of an open file in bytes.
long xfsize(FILE *f, const char *path);

// "a directory", "a FIFO", ... for what stat() found that is not a regular file.
const char *file_kind(mode_t mode);
// 1 if two stat() results are one file: the same inode on the same device (an inode number alone repeats from
// one file system to the next).
int same_file_stat(const struct stat *a, const struct stat *b);

// snprintf that exits instead of truncating (for file paths).
void xsnprintf(char *out, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define CHECK(cond, ...) \
    do { if (!(cond)) fatal_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)

#ifdef __cplusplus
}
#endif

#endif
