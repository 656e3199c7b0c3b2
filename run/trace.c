#include "run/trace.h"

#include <stdarg.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "util/errors.h"
#include "util/timer.h"

void trace_init(Trace *trace, int enabled) {
    memset(trace, 0, sizeof *trace);
    trace->enabled = enabled;
    trace->origin = timer_now();
}

void trace_attach_comm(Trace *trace, Comm *comm) {
    if (!trace->enabled) return;
    trace->comm = comm;
    comm_record(comm, 1);
}

void trace_free(Trace *trace) {
    if (trace->comm) comm_record(trace->comm, 0);
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

static TraceEvent *new_event(Trace *trace, const char *category, double start, double end) {
    if (trace->count == trace->capacity) {
        trace->capacity = trace->capacity ? 2 * trace->capacity : 256;
        TraceEvent *grown = realloc(trace->events, trace->capacity * sizeof(TraceEvent));
        if (!grown) fatal("out of memory growing the trace");
        trace->events = grown;
    }
    TraceEvent *e = &trace->events[trace->count++];
    snprintf(e->category, sizeof e->category, "%s", category);
    e->step = trace->step;
    e->start = start - trace->origin;
    e->end = end - trace->origin;
    return e;
}

// The collectives waited for since `begin`, the span's start, become events;
// those waited for earlier were waited for outside any span.
static void take_collectives(Trace *trace, double begin) {
    size_t n;
    const CommRecord *records = comm_records(trace->comm, &n);
    for (size_t i = 0; i < n; i++) {
        if (records[i].waited < begin) continue;
        TraceEvent *e = new_event(trace, "collective", records[i].issued, records[i].done);
        snprintf(e->name, sizeof e->name, "%s %zu", comm_op_names[records[i].op], records[i].count);
    }
    comm_clear_records(trace->comm);
}

void trace_end(Trace *trace, double begin, const char *category, const char *fmt, ...) {
    if (!trace || !trace->enabled) return;
    device_synchronize();
    TraceEvent *e = new_event(trace, category, begin, timer_now());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    if (trace->comm) take_collectives(trace, begin);
}

typedef struct {
    double start;
    size_t index;
} Start;

static int by_start(const void *a, const void *b) {
    const Start *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

// The Chrome trace thread of each of a rank's n events: 0 for the spans; the
// collectives, taken by start time, each go on the first of threads 1, 2, ...
// whose last collective has ended (Perfetto draws a thread's events as nested
// slices, and collectives in flight together only overlap). Returns the number
// of collective threads.
static int assign_threads(const TraceEvent *events, size_t n, int *tid) {
    Start *order = xcalloc(n, sizeof(Start));
    double *lane_end = xcalloc(n, sizeof(double));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        tid[i] = 0;
        if (strcmp(events[i].category, "collective") == 0) order[m++] = (Start){events[i].start, i};
    }
    qsort(order, m, sizeof(Start), by_start);
    int lanes = 0;
    for (size_t k = 0; k < m; k++) {
        const TraceEvent *e = &events[order[k].index];
        int lane = 0;
        while (lane < lanes && lane_end[lane] > e->start) lane++;
        if (lane == lanes) lanes++;
        lane_end[lane] = e->end;
        tid[order[k].index] = 1 + lane;
    }
    free(order);
    free(lane_end);
    return lanes;
}

static void write_thread_name(FILE *json, int pid, int tid, const char *name) {
    fprintf(json, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            pid, tid, name);
    fprintf(json, ",\n{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"sort_index\": %d}}", pid, tid, tid);
}

// One counter event: every category's bytes in use at `seconds` since the trace began.
static void write_counter(FILE *json, int pid, double seconds, const uint64_t *held) {
    fprintf(json, ",\n{\"name\": \"memory\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, \"args\": {", pid, 1e6 * seconds);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) fprintf(json, "%s\"%s\": %" PRIu64, k ? ", " : "", mem_category_names[k], held[k]);
    fprintf(json, "}}");
}

// A rank's kept step as counters: the bytes it began with when recording began,
// then after each event, and the bytes it ended with when recording stopped (a
// step that allocates nothing, DDP's, still has its level: `span` is [began, ended]).
static void write_memory(FILE *json, int pid, const MemEvent *events, size_t n, const uint64_t *start,
                         const double *span) {
    uint64_t held[MEM_NUM_CATEGORIES];
    memcpy(held, start, sizeof held);
    write_counter(json, pid, span[0], held);
    for (size_t i = 0; i < n; i++) {
        held[events[i].category] = (uint64_t)((long long)held[events[i].category] + events[i].bytes);
        write_counter(json, pid, events[i].time, held);
    }
    write_counter(json, pid, span[1], held);
}

void trace_write(const Trace *trace, Comm *comm, const char *prefix, const MemTimeline *memory) {
    size_t *counts = NULL, *memory_counts = NULL, *start_counts = NULL;
    TraceEvent *all = comm_metric_gather(comm, trace->events, trace->count * sizeof(TraceEvent), &counts);
    // the memory events on the trace's clock: seconds since this rank's trace began
    size_t n_memory = memory ? memory->count : 0;
    MemEvent *mine = xcalloc(n_memory ? n_memory : 1, sizeof(MemEvent));
    for (size_t i = 0; i < n_memory; i++) {
        mine[i] = memory->events[i];
        mine[i].time -= trace->origin;
    }
    uint64_t no_start[MEM_NUM_CATEGORIES] = {0};
    double span[2] = {memory ? memory->began - trace->origin : 0, memory ? memory->ended - trace->origin : 0};
    size_t *span_counts = NULL;
    MemEvent *all_memory = comm_metric_gather(comm, mine, n_memory * sizeof(MemEvent), &memory_counts);
    uint64_t *starts = comm_metric_gather(comm, memory ? memory->start : no_start, sizeof no_start, &start_counts);
    double *spans = comm_metric_gather(comm, span, sizeof span, &span_counts);
    free(mine);
    if (comm->rank != 0) return;
    char tsv_path[4096], json_path[4096];
    xsnprintf(tsv_path, sizeof tsv_path, "%s.tsv", prefix);
    FILE *tsv = xfopen(tsv_path, "w");
    fprintf(tsv, "# rank\tstep\tcategory\tname\tstart_ms\tend_ms\n");
    xsnprintf(json_path, sizeof json_path, "%s.json", prefix);
    FILE *json = xfopen(json_path, "w");
    fprintf(json, "{\"traceEvents\": [\n");
    const TraceEvent *events = all;
    for (int r = 0; r < comm->world; r++) {
        size_t n = counts[r] / sizeof(TraceEvent);
        int *tid = xcalloc(n, sizeof(int));
        int lanes = assign_threads(events, n, tid);
        fprintf(json, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"rank %d\"}}",
                r ? ",\n" : "", r, r);
        write_thread_name(json, r, 0, "steps");
        for (int lane = 1; lane <= lanes; lane++) {
            char name[32] = "collectives";
            if (lane > 1) snprintf(name, sizeof name, "collectives %d", lane);
            write_thread_name(json, r, lane, name);
        }
        for (size_t i = 0; i < n; i++) {
            const TraceEvent *e = &events[i];
            fprintf(tsv, "%d\t%d\t%s\t%s\t%.4f\t%.4f\n", r, e->step, e->category, e->name,
                    1e3 * e->start, 1e3 * e->end);
            fprintf(json, ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                    "\"ts\": %.1f, \"dur\": %.1f, \"args\": {\"step\": %d}}",
                    e->name, e->category, r, tid[i], 1e6 * e->start, 1e6 * (e->end - e->start), e->step);
        }
        events += n;
        free(tid);
    }
    const MemEvent *memory_events = all_memory;
    for (int r = 0; r < comm->world; r++) {
        size_t n = memory_counts[r] / sizeof(MemEvent);
        if (n > 0 || spans[2 * r + 1] > spans[2 * r])  // a kept step (none: no lane)
            write_memory(json, r, memory_events, n, starts + (size_t)r * MEM_NUM_CATEGORIES, spans + 2 * r);
        memory_events += n;
    }
    fprintf(json, "\n]}\n");
    if (fflush(tsv) != 0) fatal("--trace %s: cannot write: %s", tsv_path, strerror(errno));
    if (fflush(json) != 0) fatal("--trace %s: cannot write: %s", json_path, strerror(errno));
    xfclose(tsv, tsv_path);
    xfclose(json, json_path);
    free(all);
    free(counts);
    free(all_memory);
    free(memory_counts);
    free(starts);
    free(start_counts);
    free(spans);
    free(span_counts);
}
