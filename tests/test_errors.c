// The one way to fail: what fatal writes and how, and the checked file opening.
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/errors.h"
#include "tests/check_main.h"

// Runs fn(arg) in a child whose stderr is a packet-mode pipe (O_DIRECT), where
// each read returns exactly one write: `first` gets the child's first write to
// stderr. Returns the child's exit status (-1 if it did not exit normally).
static int first_stderr_write(void (*fn)(const char *), const char *arg, char *first, size_t size) {
    int fds[2];
    ck_assert_int_eq(pipe2(fds, O_DIRECT), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], STDERR_FILENO);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    ssize_t n = read(fds[0], first, size - 1);
    first[n > 0 ? n : 0] = '\0';
    close(fds[0]);
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void call_fatal(const char *arg) { fatal("%s is %d", arg, 42); }
static void call_fatal_at(const char *arg) { CHECK(arg == NULL, "checked %s", arg); }
static void open_for_reading(const char *path) { xfopen(path, "rb"); }

// Under mpirun every rank writes to one terminal: a message written in pieces
// interleaves with other ranks' ("shardlab: shardlab: ...").
START_TEST(test_fatal_writes_its_message_at_once) {
    char first[1024];
    ck_assert_int_eq(first_stderr_write(call_fatal, "the answer", first, sizeof first), 1);
    ck_assert_str_eq(first, "shardlab: the answer is 42\n");
    ck_assert_int_eq(first_stderr_write(call_fatal_at, "x", first, sizeof first), 1);
    ck_assert_msg(strncmp(first, "shardlab: tests/test_errors.c:", 30) == 0 && strstr(first, ": checked x\n"),
                  "got '%s'", first);
}
END_TEST

START_TEST(test_a_directory_is_not_read_as_a_file) {
    char first[1024];
    ck_assert_int_eq(first_stderr_write(open_for_reading, "/tmp", first, sizeof first), 1);
    ck_assert_str_eq(first, "shardlab: /tmp: not a regular file (a directory)\n");
}
END_TEST

// Opening a FIFO for reading waits for a writer unless told not to: the test's
// timeout catches a wait.
START_TEST(test_a_fifo_is_refused_without_waiting) {
    char path[64], first[1024], want[128];
    snprintf(path, sizeof path, "/tmp/shardlab_fifo_%d", (int)getpid());
    unlink(path);
    ck_assert_int_eq(mkfifo(path, 0600), 0);
    int status = first_stderr_write(open_for_reading, path, first, sizeof first);
    unlink(path);
    ck_assert_int_eq(status, 1);
    snprintf(want, sizeof want, "shardlab: %s: not a regular file (a FIFO)\n", path);
    ck_assert_str_eq(first, want);
}
END_TEST

START_TEST(test_a_regular_file_opens) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/shardlab_file_%d", (int)getpid());
    FILE *f = xfopen(path, "wb");
    xfwrite("abc", 1, 3, f, path);
    xfclose(f, path);
    size_t len;
    char *text = xread_file(path, &len);
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(text, "abc");
    free(text);
    unlink(path);
}
END_TEST

// One file is one inode on one device: the same inode number on another file system (a tmpfs beside the disk
// numbers its files from 1 again) is another file, which --ckpt-dir's and the outputs' checks must not refuse.
START_TEST(test_one_file_is_one_inode_on_one_device) {
    struct stat disk = {.st_dev = makedev(254, 0), .st_ino = 1234}, same = disk, other_device = disk,
                other_inode = disk;
    other_device.st_dev = makedev(0, 26);
    other_inode.st_ino = 1235;
    ck_assert_int_eq(same_file_stat(&disk, &same), 1);
    ck_assert_int_eq(same_file_stat(&disk, &other_device), 0);
    ck_assert_int_eq(same_file_stat(&disk, &other_inode), 0);
    char path[64];  // and a real file against itself, by stat() and fstat()
    snprintf(path, sizeof path, "/tmp/shardlab_same_%d", (int)getpid());
    FILE *f = xfopen(path, "wb");
    struct stat by_path, by_fd;
    ck_assert_int_eq(stat(path, &by_path), 0);
    ck_assert_int_eq(fstat(fileno(f), &by_fd), 0);
    ck_assert_int_eq(same_file_stat(&by_path, &by_fd), 1);
    xfclose(f, path);
    unlink(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("fatal and files");
    tcase_add_test(tc, test_fatal_writes_its_message_at_once);
    tcase_add_test(tc, test_a_directory_is_not_read_as_a_file);
    tcase_add_test(tc, test_a_fifo_is_refused_without_waiting);
    tcase_add_test(tc, test_a_regular_file_opens);
    tcase_add_test(tc, test_one_file_is_one_inode_on_one_device);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
