#include "run/stop_signals.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errors.h"

static void stop_set(sigset_t *set) {
    CHECK(sigemptyset(set) == 0 && sigaddset(set, SIGINT) == 0 && sigaddset(set, SIGTERM) == 0 &&
              sigaddset(set, SIGUSR1) == 0,
          "sigaddset: %s", strerror(errno));
}

// The waiting thread: each stop signal is counted and said at once, in one line
// on stderr (the step in progress may take minutes, the setup of a large model too).
// Under mpirun a forwarded SIGUSR1 reaches every rank: only rank 0 (or a process
// whose rank is not known yet) says it; a signal sent to one rank is said by it; the
// SIGTERM with which mpirun ends an aborted job's ranks is not said.
static void *wait_for_stops(void *arg) {
    StopSignals *stop = arg;
    int launched_by_mpirun = getenv("OMPI_COMM_WORLD_SIZE") != NULL;  // Open MPI's, set in every rank it starts
    sigset_t set;
    stop_set(&set);
    for (;;) {
        siginfo_t info;
        int signal_number = sigwaitinfo(&set, &info);
        if (signal_number < 0) {
            CHECK(errno == EINTR, "sigwaitinfo: %s", strerror(errno));
            continue;
        }
        int before = atomic_fetch_add(&stop->taken, 1), rank = atomic_load(&stop->rank);
        if (signal_number == SIGUSR1 && rank > 0) continue;
        // mpirun ends the ranks of a job it aborts (another rank's error, said already) with SIGTERM: not a stop
        // anyone asked for, and nothing to say
        if (launched_by_mpirun && signal_number != SIGUSR1 && info.si_code == SI_USER && info.si_pid == getppid())
            continue;
        char line[200];
        char who[32] = "";
        if (rank > 0) snprintf(who, sizeof who, "rank %d: ", rank);
        if (before == 0)
            snprintf(line, sizeof line, "%sSIG%s taken: stopping after this step, then saving (if --ckpt-dir)", who,
                     sigabbrev_np(signal_number));
        else
            snprintf(line, sizeof line, "%sSIG%s: already stopping after this step (SIGKILL stops at once, "
                     "without saving)", who, sigabbrev_np(signal_number));
        error_print(line);
    }
    return NULL;
}

void stop_signals_block(void) {
    sigset_t set;
    stop_set(&set);
    int err = pthread_sigmask(SIG_BLOCK, &set, NULL);
    CHECK(err == 0, "pthread_sigmask: %s", strerror(err));
}

void stop_signals_start(StopSignals *stop) {
    if (stop->started) {  // a later run of the same job (--serve): the thread waits already
        stop->counted = atomic_load(&stop->taken);
        return;
    }
    stop->started = 1;
    int err;
    atomic_init(&stop->taken, 0);
    atomic_init(&stop->rank, -1);
    stop->counted = 0;
    pthread_t thread;
    pthread_attr_t attr;
    CHECK(pthread_attr_init(&attr) == 0 && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0,
          "pthread_attr: cannot set up the signal thread");
    err = pthread_create(&thread, &attr, wait_for_stops, stop);
    CHECK(err == 0, "pthread_create (the signal thread): %s", strerror(err));
    pthread_setname_np(thread, STOP_SIGNALS_THREAD);  // a name for ps and the tests; nothing depends on it
    pthread_attr_destroy(&attr);
}

int stop_signals_take(StopSignals *stop) {
    int taken = atomic_load(&stop->taken), since = taken - stop->counted;
    stop->counted = taken;
    return since;
}
