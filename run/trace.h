// trace.h: a per-rank record of what happened when during training steps
// (forward and backward of each unit, each strategy hook, the optimizer), for the
// step timeline plot and for Perfetto (Chrome trace JSON). With a Comm attached,
// each collective also appears from its start to its completion, on a lane of
// its own: category "collective", under the rank's compute in Perfetto.
#ifndef SHARDLAB_TRACE_H
#define SHARDLAB_TRACE_H

#include <stddef.h>

#include "comm/comm.h"
#include "device/mem_timeline.h"

typedef struct {
    char name[32];      // "forward u3", "gather u3", "optimizer", ...
    char category[16];  // "compute", "comm", "optim", "collective"
    int step;
    double start, end;  // seconds since the trace began
} TraceEvent;

typedef struct {
    int enabled;
    int step;           // the step new events belong to
    double origin;
    TraceEvent *events;
    size_t count, capacity;
    Comm *comm;         // where the collectives come from (trace_attach_comm), or NULL
} Trace;

void trace_init(Trace *trace, int enabled);
void trace_free(Trace *trace);
// Returns a token for trace_end; does nothing when the trace is off.
double trace_begin(const Trace *trace);
void trace_end(Trace *trace, double begin, const char *category, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Puts comm's collectives on the trace: every collective the rank waits for
// inside a span (between trace_begin and the matching trace_end; spans do not
// nest) becomes a "collective" event named "<op> <elements>", from the moment it
// was started to its completion. Collectives waited for outside spans (a final
// gather) or while the trace is off (evaluation) are left out. Call it once,
// after trace_init and comm_init; trace_free detaches. Nothing happens for a
// trace that is off.
void trace_attach_comm(Trace *trace, Comm *comm);
// Rank 0 writes every rank's events to PREFIX.tsv (rank, step, category, name,
// start and end in ms, for gnuplot) and PREFIX.json (Chrome trace, one process
// per rank, opens in Perfetto: the spans on thread 0, the collectives on threads
// 1, 2, ... so that those in flight together do not overlap on one thread).
// With `memory` (NULL: none), the rank's kept step of memory goes into the JSON
// as counter events ("ph": "C", one series per category: bytes in use), from
// the step's start to its end, under the spans. Every rank must call it.
void trace_write(const Trace *trace, Comm *comm, const char *prefix, const MemTimeline *memory);

#endif
