// trace.h: a per-rank record of what happened when during training steps
// (forward and backward of each unit, each strategy hook, the optimizer), for the
// step timeline plot and for Perfetto (Chrome trace JSON).
#ifndef SHARDLAB_TRACE_H
#define SHARDLAB_TRACE_H

#include <stddef.h>

#include "comm.h"

typedef struct {
    char name[32];      // "forward u3", "gather u3", "optimizer", ...
    char category[16];  // "compute", "comm", "optim"
    int step;
    double start, end;  // seconds since the trace began
} TraceEvent;

typedef struct {
    int enabled;
    int step;           // the step new events belong to
    double origin;
    TraceEvent *events;
    size_t count, capacity;
} Trace;

void trace_init(Trace *trace, int enabled);
void trace_free(Trace *trace);
// Returns a token for trace_end; does nothing when the trace is off.
double trace_begin(const Trace *trace);
void trace_end(Trace *trace, double begin, const char *category, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Rank 0 writes every rank's events to PREFIX.tsv (rank, step, category, name,
// start and end in ms, for gnuplot) and PREFIX.json (Chrome trace, one process
// per rank, opens in Perfetto). Every rank must call it.
void trace_write(const Trace *trace, Comm *comm, const char *prefix);

#endif
