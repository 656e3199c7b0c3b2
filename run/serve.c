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

static int connect_to(const char *path, int rank) {
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path)
        fatal("--serve %s: a socket's path is at most %zu bytes", path, sizeof address.sun_path - 1);
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0, "--serve: socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0)
        fatal("--serve %s: cannot connect: %s", path, strerror(errno));
    FILE *out = fdopen(dup(fd), "w");
    CHECK(out && fprintf(out, "%d\n", rank) > 0 && fclose(out) == 0, "--serve %s: cannot write: %s", path,
          strerror(errno));
    return fd;
}

// The next request's bytes (*size of them, NUL-terminated fields), or NULL when
// the client is done (a request of size 0, or the socket closed).
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

int train_serve(const char *socket_path, int *argc, char ***argv, StrategyPlugin (*make_plugin)(void)) {
    stop_signals_block();  // before MPI starts its threads, as train_main does
    Comm job;              // MPI, once for every run: each run's comm_init finds it started
    comm_init(&job, argc, argv);
    int fd = connect_to(socket_path, job.rank);
    FILE *in = fdopen(fd, "r"), *answer = fdopen(dup(fd), "w");
    CHECK(in && answer, "--serve: fdopen: %s", strerror(errno));
    char *request, *fields[MAX_FIELDS + 1];
    size_t size;
    while ((request = read_request(in, &size))) {
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
        CHECK(fprintf(answer, "%d\n", status) > 0 && fflush(answer) == 0, "--serve: cannot answer: %s",
              strerror(errno));
    }
    fclose(answer);
    fclose(in);
    comm_finalize(&job);
    return 0;
}
