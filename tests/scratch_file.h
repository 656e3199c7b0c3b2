// scratch_file.h: a unit test's scratch file, gone when its process exits.
#ifndef SHARDLAB_SCRATCH_FILE_H
#define SHARDLAB_SCRATCH_FILE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// This test process's scratch file, $TMPDIR/shardlab_<name>_<pid> (/tmp without
// TMPDIR), removed when the process exits: Check runs each test in a process of
// its own, and a test that expects an error exits before it could remove it.
static char scratch_file_path[256];
static void remove_scratch_file(void) { unlink(scratch_file_path); }
static inline const char *scratch_file(const char *name) {
    static int registered = 0;
    const char *dir = getenv("TMPDIR");
    snprintf(scratch_file_path, sizeof scratch_file_path, "%s/shardlab_%s_%d", dir && *dir ? dir : "/tmp", name,
             (int)getpid());
    if (!registered) registered = atexit(remove_scratch_file) == 0;
    return scratch_file_path;
}

#endif
