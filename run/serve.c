#include "run/serve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "comm/comm.h"
#include "run/stop_signals.h"
#include "run/train_loop.h"
#include "util/errors.h"

enum { MAX_FIELDS = 4096 };

// DIR/rankR, listening: bound and listening under another name first, then renamed, so that a client
// that finds the name can connect (between bind and listen a connection is refused).
static int listen_at(const char *dir, int rank, char *path, size_t size) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    char bound[4200];
    xsnprintf(path, size, "%s/rank%d", dir, rank);
    xsnprintf(bound, sizeof bound, "%s/.rank%d", dir, rank);
    if (strlen(bound) >= sizeof address.sun_path)
        fatal("--serve %s: a socket's path is at most %zu bytes, and %s is longer", dir, sizeof address.sun_path - 1,
              bound);
    strcpy(address.sun_path, bound);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0, "--serve: socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 || listen(fd, 16) != 0 || rename(bound, path) != 0)
        fatal("--serve %s: cannot listen at %s: %s", dir, path, strerror(errno));
    return fd;
}

// The next request's bytes (*size of them, NUL-terminated fields), or NULL when
// the job is to end (a request of size 0, or nothing sent).
static char *read_request(FILE *in, size_t *size) {
    char line[32];
    if (!fgets(line, sizeof line, in)) return NULL;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(line, &end, 10);
    if (errno || end == line || *end != '\n') fatal("--serve: a request starts with its size, not '%.20s'", line);
    if (n == 0) return NULL;
    char *bytes = xmalloc(n + 1);
    if (fread(bytes, 1, n, in) != n) fatal("--serve: a request of %llu bytes ended early", n);
    bytes[n] = 0;
    *size = n;
    return bytes;
}

// Points fd (1 or 2) at path, appended to (the ranks share the file, as they
// share mpirun's output); returns the descriptor to restore.
static int redirect(int fd, const char *path) {
    fflush(fd == 1 ? stdout : stderr);
    int saved = dup(fd), file = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (saved < 0 || file < 0) fatal("--serve: cannot open %s: %s", path, strerror(errno));
    CHECK(dup2(file, fd) == fd && close(file) == 0, "--serve: dup2: %s", strerror(errno));
    return saved;
}

static void restore(int fd, int saved) {
    fflush(fd == 1 ? stdout : stderr);
    CHECK(dup2(saved, fd) == fd && close(saved) == 0, "--serve: dup2: %s", strerror(errno));
}

int train_serve(const char *dir, int *argc, char ***argv, StrategyPlugin (*make_plugin)(void)) {
    stop_signals_block();  // before MPI starts its threads, as train_main does
    Comm job;              // MPI, once for every run: each run's comm_init finds it started
    comm_init(&job, argc, argv);
    char path[4200];
    int listener = listen_at(dir, job.rank, path, sizeof path);
    char *fields[MAX_FIELDS + 1];
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);  // no CPU while no client asks
        if (fd < 0 && errno == EINTR) continue;
        CHECK(fd >= 0, "--serve: accept: %s", strerror(errno));
        FILE *in = fdopen(fd, "r"), *answer = fdopen(dup(fd), "w");
        CHECK(in && answer, "--serve: fdopen: %s", strerror(errno));
        size_t size;
        char *request = read_request(in, &size);
        if (!request) {
            fclose(answer);
            fclose(in);
            break;
        }
        int count = 0;
        for (char *f = request; f < request + size; f += strlen(f) + 1) {
            if (count == MAX_FIELDS) fatal("--serve: a request of more than %d fields", MAX_FIELDS);
            fields[count++] = f;
        }
        if (count < 3) fatal("--serve: a request names its two output files and argv[0], at least");
        fields[count] = NULL;
        int out = redirect(1, fields[0]), err = redirect(2, fields[1]);
        StrategyPlugin plugin = make_plugin();
        int status = train_main(count - 2, fields + 2, &plugin);
        strategy_plugin_free(&plugin);
        restore(2, err);
        restore(1, out);
        free(request);
        CHECK(fprintf(answer, "%d\n", status) > 0 && fclose(answer) == 0, "--serve: cannot answer: %s",
              strerror(errno));
        fclose(in);
    }
    close(listener);
    unlink(path);
    comm_finalize(&job);
    return 0;
}
