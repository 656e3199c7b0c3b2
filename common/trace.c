#include "trace.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "util/errors.h"
#include "util/timer.h"

void trace_init(Trace *trace, int enabled) {
    memset(trace, 0, sizeof *trace);
    trace->enabled = enabled;
    trace->origin = timer_now();
}

void trace_free(Trace *trace) {
    free(trace->events);
    memset(trace, 0, sizeof *trace);
}

// On a GPU the host only queues work; tracing waits for it so that the times
// are the GPU's (which costs the overlap a timeline would otherwise show).
double trace_begin(const Trace *trace) {
    if (!trace || !trace->enabled) return 0.0;
    device_synchronize();
    return timer_now();
}

void trace_end(Trace *trace, double begin, const char *category, const char *fmt, ...) {
    if (!trace || !trace->enabled) return;
    device_synchronize();
    if (trace->count == trace->capacity) {
        trace->capacity = trace->capacity ? 2 * trace->capacity : 256;
        TraceEvent *grown = realloc(trace->events, trace->capacity * sizeof(TraceEvent));
        if (!grown) fatal("out of memory growing the trace");
        trace->events = grown;
    }
    TraceEvent *e = &trace->events[trace->count++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    snprintf(e->category, sizeof e->category, "%s", category);
    e->step = trace->step;
    e->start = begin - trace->origin;
    e->end = timer_now() - trace->origin;
}

void trace_write(const Trace *trace, Comm *comm, const char *prefix) {
    size_t *counts = NULL;
    TraceEvent *all = comm_metric_gather(comm, trace->events, trace->count * sizeof(TraceEvent), &counts);
    if (comm->rank != 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.tsv", prefix);
    FILE *tsv = xfopen(path, "w");
    fprintf(tsv, "# rank\tstep\tcategory\tname\tstart_ms\tend_ms\n");
    snprintf(path, sizeof path, "%s.json", prefix);
    FILE *json = xfopen(path, "w");
    fprintf(json, "{\"traceEvents\": [\n");
    const TraceEvent *e = all;
    for (int r = 0; r < comm->world; r++) {
        fprintf(json, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
                r ? ",\n" : "", r, r);
        for (size_t i = 0; i < counts[r] / sizeof(TraceEvent); i++, e++) {
            fprintf(tsv, "%d\t%d\t%s\t%s\t%.4f\t%.4f\n", r, e->step, e->category, e->name,
                    1e3 * e->start, 1e3 * e->end);
            fprintf(json, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": 0, "
                    "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": %d}}",
                    e->name, e->category, r, 1e6 * e->start, 1e6 * (e->end - e->start), e->step);
        }
    }
    fprintf(json, "\n]}\n");
    xfclose(tsv, prefix);
    xfclose(json, prefix);
    free(all);
    free(counts);
}
