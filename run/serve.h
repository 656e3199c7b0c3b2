// serve.h: one job, many runs. `train_X --serve DIR` (the flag alone) starts the
// job once, then runs, one after another, the command lines clients send it (the
// test drivers and the grader under make test: tests/serve.py), each as if the job
// had been started with it. Start-up is paid once: mpirun, MPI_Init, the libraries
// and their kernels are most of a tiny run's time (docs/testing.md).
//
// The protocol: rank R listens on the Unix socket DIR/rankR. A client sends each
// rank the same request on a connection of its own: "SIZE\n" and SIZE bytes,
// NUL-terminated fields (the file for the run's stdout, the file for its stderr,
// argv[0], the arguments), and reads "STATUS\n" back. A request of size 0 ends the
// job (status 0). A run that stops on a fatal error ends the job as it would have
// ended a job of its own, with its status.
#ifndef SHARDLAB_SERVE_H
#define SHARDLAB_SERVE_H

#include "kit/strategy.h"

// Serves the runs; each gets a fresh plugin from make_plugin. Returns the
// process exit status.
int train_serve(const char *dir, int *argc, char ***argv, StrategyPlugin (*make_plugin)(void));

#endif
