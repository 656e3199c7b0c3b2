// serve.h: one job, many runs. `train_X --serve SOCKET` (the flag alone) starts
// the job once and then runs, one after another, the command lines a client sends
// over the Unix socket SOCKET (tests/testlib.py: the test drivers' runs), each as
// if the job had been started with it. Start-up is paid once: mpirun, MPI_Init,
// the libraries and their kernels are most of a tiny run's time (docs/testing.md).
//
// The protocol, per rank: connect, send "RANK\n"; then each request is "SIZE\n"
// and SIZE bytes, NUL-terminated fields: the file for the run's stdout, the file
// for its stderr, argv[0], the arguments; the answer is "STATUS\n". A request of
// size 0, or the client gone, ends the job (status 0). A run that stops on a fatal
// error ends the job as it would have ended a job of its own, with its status.
#ifndef SHARDLAB_SERVE_H
#define SHARDLAB_SERVE_H

#include "kit/strategy.h"

// Serves the runs; each gets a fresh plugin from make_plugin. Returns the
// process exit status.
int train_serve(const char *socket_path, int *argc, char ***argv, StrategyPlugin (*make_plugin)(void));

#endif
