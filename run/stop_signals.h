// stop_signals.h: SIGINT, SIGTERM or SIGUSR1 ask a run to finish its step, save
// and stop (docs/checkpoints.md). SIGUSR1 is the one Open MPI's mpirun forwards to
// the ranks and then waits for, so the job ends with status 0 (SIGTERM or SIGINT
// to mpirun aborts the job).
//
// No handler runs: the three stay blocked in every thread, and one thread of the
// process waits for them (sigwaitinfo), says at once that the stop was taken, and
// counts it for the loop, which reads the count between steps. A handler's frame
// is written below the interrupted thread's stack pointer, and oneDNN's JIT gemm
// kernels (2.x) point theirs into a heap workspace while they run: a signal there
// would corrupt the heap.
#ifndef SHARDLAB_STOP_SIGNALS_H
#define SHARDLAB_STOP_SIGNALS_H

#include <stdatomic.h>

// The waiting thread's name (/proc/PID/task/TID/comm): while it waits, the three
// show as unblocked in its /proc status (the kernel's wait lifts them), and only there.
#define STOP_SIGNALS_THREAD "stop-signals"

typedef struct {
    atomic_int taken;  // stop signals taken so far, by the waiting thread
    atomic_int rank;   // this process's rank once known (-1 before), for its line
    int counted;       // of them, those stop_signals_take has returned (the loop's alone)
    int started;       // the thread runs (a job that serves many runs starts it once)
} StopSignals;

// Blocks the three in the calling thread: first thing in main, before MPI and
// OpenMP start threads, which inherit the mask. A signal in the process's first
// milliseconds, before main runs (the dynamic loader, the libraries' own start),
// still takes its default action.
void stop_signals_block(void);
// Starts the thread that waits for them, once MPI has started (no thread of ours
// runs through MPI's start); one sent before stays pending until then. Called
// again (the next run of a job that serves many, run/serve.h), it only forgets
// the stops taken between the runs.
void stop_signals_start(StopSignals *stop);
// The signals taken since the last call (0 if none); the loop calls it between steps.
int stop_signals_take(StopSignals *stop);

#endif
