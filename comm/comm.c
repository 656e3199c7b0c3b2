// comm.c: what every collective does, whatever carries it: the call checks its
// arguments, counts its bytes into the group's counters (and those of the
// groups above it) and makes its handle; the group's backend moves the bytes
// (comm/backend.h: MPI on host buffers with its engine thread, mpi.c; NCCL on a
// GPU's, nccl.cu; the planner's simulated network, sim.c); each wait is timed
// and, for the trace, recorded.
//
//   comm_all_gather_start -> start(): check, count, handle -> backend->start
//   comm_wait             -> backend->wait -> record, count the time waited
#include "comm/comm.h"

#include <stdlib.h>
#include <string.h>

#include "comm/backend.h"
#include "comm/sim_clock.h"
#include "util/errors.h"
#include "util/timer.h"

// The records kept for the trace; events[i] is record i's NCCL completion event
// until comm_records reads its time (NULL for MPI).
struct CommLog {
    CommRecord *records;
    void **events;
    size_t count, capacity;
};
#define COMM_LOG_MAX 65536

const char *const comm_op_names[COMM_NUM_OPS] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "all_to_all", "gather", "barrier",
};

// ---- groups ----

void comm_split(Comm *parent, int first, int stride, int size, int across, Comm *group) {
    int r = parent->rank;
    CHECK(stride > 0 && size > 0 && r >= first && (r - first) % stride == 0 && (r - first) / stride < size &&
              first + stride * (size - 1) < parent->world,
          "comm_split: rank %d is not in the group %d + %d k, k < %d, of %d ranks", r, first, stride, size,
          parent->world);
    memset(group, 0, sizeof *group);
    group->parent = parent;
    group->is_across = across;
    group->backend = parent->backend;
    group->rank = (r - first) / stride;
    group->world = size;
    group->local_size = 1;
    parent->backend->split(parent, group, first, stride);
}

void comm_free_group(Comm *group) {
    CHECK(group->parent, "comm_free_group: rank %d's group was not made by comm_split", group->rank);
    comm_record(group, 0);
    group->backend->free(group);
    memset(group, 0, sizeof *group);
}

void comm_finalize(Comm *comm) {
    comm_record(comm, 0);
    comm->backend->free(comm);
}

const char *comm_backend_name(const Comm *comm) { return comm->backend->name; }

// ---- counting ----

// The ring and chain formulas of comm.h for a buffer of S bytes.
static void ring_bytes(CommOp op, uint64_t S, int rank, int world, int root, uint64_t *sent, uint64_t *recv) {
    uint64_t N = (uint64_t)world;
    *sent = *recv = 0;
    if (world == 1) return;
    switch (op) {
    case COMM_ALL_REDUCE: *sent = *recv = 2 * (N - 1) * S / N; break;
    case COMM_REDUCE_SCATTER:
    case COMM_ALL_GATHER:
    case COMM_ALL_TO_ALL: *sent = *recv = (N - 1) * S / N; break;
    case COMM_BROADCAST:
        *sent = (rank == (root + world - 1) % world) ? 0 : S;  // the chain's last only receives
        *recv = rank == root ? 0 : S;
        break;
    case COMM_REDUCE:
        *sent = rank == root ? 0 : S;
        *recv = (rank == (root + 1) % world) ? 0 : S;  // the chain starts after the root
        break;
    case COMM_GATHER:  // each part straight to the root
        *sent = rank == root ? 0 : S / N;
        *recv = rank == root ? (N - 1) * S / N : 0;
        break;
    default: break;
    }
}

// The planner's time of the same ring and chain (sim_clock.h): latency steps and bytes over one link.
double collective_seconds(CommOp op, double bytes, int ranks, Link link) {
    if (ranks <= 1) return 0;
    double n = ranks;
    switch (op) {
    case COMM_ALL_REDUCE: return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * bytes / link.beta;
    case COMM_REDUCE_SCATTER:
    case COMM_ALL_GATHER:
    case COMM_ALL_TO_ALL:
    case COMM_GATHER: return (n - 1) * link.alpha + (n - 1) / n * bytes / link.beta;  // the root's link, for a gather
    case COMM_BROADCAST:
    case COMM_REDUCE: return (n - 1) * link.alpha + bytes / link.beta;
    default: return 0;
    }
}

void comm_ring_bytes(CommOp op, size_t count, DType dtype, int rank, int world, int root, uint64_t *sent,
                     uint64_t *recv) {
    ring_bytes(op, (uint64_t)count * dtype_size(dtype), rank, world, root, sent, recv);
}

static void add_call(CommStats *stats, CommOp op, size_t count, uint64_t sent, uint64_t recv) {
    CommCounter *c = &stats->ops[op];
    c->calls++;
    c->elements += count;
    c->bytes_sent += sent;
    c->bytes_recv += recv;
}

// Into the group's counters and those of every group it was split from. An
// element counts the bytes the backend carries it in (MPI: its datatype's).
static void count_call(Comm *comm, CommOp op, size_t count, DType dtype, int root) {
    uint64_t sent, recv;
    size_t bytes = comm->backend->element_bytes ? comm->backend->element_bytes(comm, dtype) : dtype_size(dtype);
    ring_bytes(op, (uint64_t)count * bytes, comm->rank, comm->world, root, &sent, &recv);
    for (Comm *c = comm; c; c = c->parent) {
        add_call(&c->stats, op, count, sent, recv);
        if (comm->is_across) add_call(&c->across, op, count, sent, recv);
        if (comm->spans_machines) add_call(&c->machines, op, count, sent, recv);
    }
}

// Time spent waiting, likewise.
static void count_wait(Comm *comm, CommOp op, double seconds) {
    for (Comm *c = comm; c; c = c->parent) {
        c->stats.ops[op].seconds += seconds;
        if (comm->is_across) c->across.ops[op].seconds += seconds;
    }
}

// A node reduction's bytes that crossed, once it is complete, likewise.
static void add_moved(CommCounter *c, NodeMoved moved) {
    c->node_calls++;
    c->node_bytes_in += moved.in;
    c->node_bytes_out += moved.out;
}

void comm_count_moved(Comm *comm, CommOp op, NodeMoved moved) {
    for (Comm *c = comm; c; c = c->parent) {
        add_moved(&c->stats.ops[op], moved);
        if (comm->is_across) add_moved(&c->across.ops[op], moved);
    }
}

// ---- starting ----

// Debug mode: every rank compares its arguments with everyone else's before the
// collective starts, so a mismatch becomes the same clear error on all ranks
// instead of a hang or a silent corruption.
static void check_arguments(Comm *comm, CommOp op, size_t count, DType dtype, int root, int buffers_ok) {
    int root_ok = root >= 0 && root < comm->world;
    int divisible =
        !((op == COMM_REDUCE_SCATTER || op == COMM_ALL_GATHER || op == COMM_ALL_TO_ALL || op == COMM_GATHER) &&
          count % (size_t)comm->world);
    // int8 is a quantized wire's bytes (device/quantize.h): moved, never summed
    if (dtype == DTYPE_INT8 && (op == COMM_ALL_REDUCE || op == COMM_REDUCE_SCATTER || op == COMM_REDUCE))
        fatal("%s of int8: a quantized wire's codes cannot be summed (dequantize them first)", comm_op_names[op]);
    if (!comm->debug_checks) {
        // the local checks are free, so they always run; they end only this rank
        if (!buffers_ok) fatal("%s: null buffer", comm_op_names[op]);
        if (!root_ok) fatal("%s: root %d is not a rank of %d", comm_op_names[op], root, comm->world);
        if (!divisible)
            fatal("%s: count %zu is not divisible by the %d ranks", comm_op_names[op], count, comm->world);
        return;
    }
    long long mine[6] = {op, (long long)count, root, buffers_ok && root_ok, divisible, dtype};
    long long lo[6], hi[6];
    comm->backend->host->agree_min_max(comm, mine, lo, hi, 6);
    if (lo[0] != hi[0]) fatal("ranks called different collectives (%s here)", comm_op_names[op]);
    if (lo[1] != hi[1])
        fatal("%s counts differ across ranks (%lld..%lld, %zu here)", comm_op_names[op], lo[1], hi[1], count);
    if (lo[2] != hi[2]) fatal("%s roots differ across ranks (%lld..%lld)", comm_op_names[op], lo[2], hi[2]);
    if (!lo[3])
        fatal("%s: a null buffer or a root outside 0..%d on some rank (here: buffer %s, root %d)",
              comm_op_names[op], comm->world - 1, buffers_ok ? "ok" : "NULL", root);
    if (!lo[4]) fatal("%s: count %zu is not divisible by the %d ranks", comm_op_names[op], count, comm->world);
    if (lo[5] != hi[5])
        fatal("%s element types differ across ranks (%s here)", comm_op_names[op], dtype_name(dtype));
}

// The log this group's collectives are kept in (its own, or the nearest parent's), or NULL.
static CommLog *log_of(const Comm *comm) {
    CommLog *log = comm->log;
    for (const Comm *c = comm->parent; !log && c; c = c->parent) log = c->log;
    return log;
}

// When a collective is issued or waited for, as its record keeps it: read from the
// clock only while a log keeps records (a dry run's thousands of collectives keep none).
static double record_time(const Comm *comm) { return log_of(comm) ? timer_now() : 0; }

static CommHandle new_handle(const Comm *comm, CommOp op, CommReduceOp reduce_op, void *result, size_t result_count,
                             size_t count, DType dtype) {
    CommHandle h = {.active = 1, .op = op, .reduce_op = reduce_op, .dtype = dtype, .result = result,
                    .result_count = reduce_op == COMM_AVG ? result_count : 0, .count = count,
                    .issued = record_time(comm)};
    return h;
}


// What every collective does to start: check, count, a handle, then the backend.
// result: where an average is applied on completion (result_count elements).
static CommHandle start(Comm *comm, CommOp op, CommReduceOp reduce_op, const void *send, void *recv, size_t count,
                        DType dtype, int root, int buffers_ok, void *result, size_t result_count) {
    check_arguments(comm, op, count, dtype, root, buffers_ok);
    count_call(comm, op, count, dtype, root);
    CommHandle h = new_handle(comm, op, reduce_op, result, result_count, count, dtype);
    comm->backend->start(comm, &h, send, recv, count, root);
    return h;
}

CommHandle comm_all_reduce_start(Comm *comm, void *buf, size_t count, DType dtype, CommReduceOp op) {
    return start(comm, COMM_ALL_REDUCE, op, buf, buf, count, dtype, 0, buf != NULL, buf, count);
}

CommHandle comm_reduce_scatter_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype,
                                     CommReduceOp op) {
    return start(comm, COMM_REDUCE_SCATTER, op, send, recv, count, dtype, 0, send && recv, recv,
                 count / (size_t)comm->world);
}

CommHandle comm_all_gather_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype) {
    return start(comm, COMM_ALL_GATHER, COMM_SUM, send, recv, count, dtype, 0, send && recv, recv, 0);
}

CommHandle comm_all_to_all_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype) {
    return start(comm, COMM_ALL_TO_ALL, COMM_SUM, send, recv, count, dtype, 0, send && recv, recv, 0);
}

CommHandle comm_gather_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root) {
    return start(comm, COMM_GATHER, COMM_SUM, send, recv, count, dtype, root, send && (recv || comm->rank != root),
                 recv, 0);
}

CommHandle comm_broadcast_start(Comm *comm, void *buf, size_t count, DType dtype, int root) {
    return start(comm, COMM_BROADCAST, COMM_SUM, buf, buf, count, dtype, root, buf != NULL, buf, 0);
}

CommHandle comm_reduce_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root,
                             CommReduceOp op) {
    int is_root = comm->rank == root;
    return start(comm, COMM_REDUCE, op, send, recv, count, dtype, root, send && (recv || !is_root), recv,
                 is_root ? count : 0);
}

// ---- waiting ----

// Keeps the record of a collective just waited for, when recording; an NCCL
// event stays with it until comm_records reads its time.
// A group's records go to the nearest group above it that keeps them (the trace
// attaches the world's).
static void keep_record(Comm *comm, const CommHandle *h, double waited, double done, void *event) {
    CommLog *log = log_of(comm);
    if (!log) {
        if (event) comm->backend->event_free(event);
        return;
    }
    if (log->count == COMM_LOG_MAX) {  // nobody took them: drop the older half
        size_t half = COMM_LOG_MAX / 2;
        for (size_t i = 0; i < half; i++)
            if (log->events[i]) comm->backend->event_free(log->events[i]);
        memmove(log->records, log->records + half, (log->count - half) * sizeof *log->records);
        memmove(log->events, log->events + half, (log->count - half) * sizeof *log->events);
        log->count -= half;
    }
    if (log->count == log->capacity) {
        log->capacity = log->capacity ? 2 * log->capacity : 64;
        CommRecord *records = realloc(log->records, log->capacity * sizeof *records);
        void **events = realloc(log->events, log->capacity * sizeof *events);
        if (!records || !events) fatal("out of memory keeping %zu collective records", log->capacity);
        log->records = records;
        log->events = events;
    }
    // issued before the log began (no time taken then): the record starts when it was waited for
    double issued = h->issued ? h->issued : waited;
    log->records[log->count] = (CommRecord){.op = h->op, .count = h->count, .issued = issued, .done = done,
                                            .waited = waited};
    log->events[log->count++] = event;
}

// The backend's wait, then the record and the time waited.
static void finish(Comm *comm, const CommBackend *backend, CommHandle *h) {
    double waited = record_time(comm), done = 0;
    void *event = NULL;
    int keep = 1;
    double seconds = backend->wait(comm, h, &done, &event, &keep);
    if (keep) keep_record(comm, h, waited, done, event);
    h->request = NULL;
    h->active = 0;
    count_wait(comm, h->op, seconds);
}

int comm_wait(Comm *comm, CommHandle *h) {
    if (!h->active) return 0;
    finish(comm, comm->backend, h);
    return 1;
}

void comm_progress(Comm *comm, CommHandle *h) {
    if (h->active && comm->backend->progress) comm->backend->progress(comm, h);
}

int comm_test(Comm *comm, CommHandle *h) { return !h->active || comm->backend->test(comm, h); }

void comm_all_reduce(Comm *comm, void *buf, size_t count, DType dtype, CommReduceOp op) {
    CommHandle h = comm_all_reduce_start(comm, buf, count, dtype, op);
    comm_wait(comm, &h);
}

void comm_reduce_scatter(Comm *comm, const void *send, void *recv, size_t count, DType dtype, CommReduceOp op) {
    CommHandle h = comm_reduce_scatter_start(comm, send, recv, count, dtype, op);
    comm_wait(comm, &h);
}

void comm_all_gather(Comm *comm, const void *send, void *recv, size_t count, DType dtype) {
    CommHandle h = comm_all_gather_start(comm, send, recv, count, dtype);
    comm_wait(comm, &h);
}

void comm_all_to_all(Comm *comm, const void *send, void *recv, size_t count, DType dtype) {
    CommHandle h = comm_all_to_all_start(comm, send, recv, count, dtype);
    comm_wait(comm, &h);
}

void comm_gather(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root) {
    CommHandle h = comm_gather_start(comm, send, recv, count, dtype, root);
    comm_wait(comm, &h);
}

void comm_broadcast(Comm *comm, void *buf, size_t count, DType dtype, int root) {
    CommHandle h = comm_broadcast_start(comm, buf, count, dtype, root);
    comm_wait(comm, &h);
}

void comm_reduce(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root, CommReduceOp op) {
    CommHandle h = comm_reduce_start(comm, send, recv, count, dtype, root, op);
    comm_wait(comm, &h);
}

// The barrier and the double all-reduce are host collectives whatever the
// backend: they go through its host backend (the MPI engine under NCCL too), in
// order with the others.
void comm_barrier(Comm *comm) {
    check_arguments(comm, COMM_BARRIER, 0, DTYPE_FP32, 0, 1);
    count_call(comm, COMM_BARRIER, 0, DTYPE_FP32, 0);
    CommHandle h = new_handle(comm, COMM_BARRIER, COMM_SUM, NULL, 0, 0, DTYPE_FP32);
    comm->backend->host->start(comm, &h, NULL, NULL, 0, 0);
    finish(comm, comm->backend->host, &h);
}

double comm_all_reduce_double(Comm *comm, double value) {
    check_arguments(comm, COMM_ALL_REDUCE, 2, DTYPE_FP32, 0, 1);
    count_call(comm, COMM_ALL_REDUCE, 2, DTYPE_FP32, 0);  // 8 bytes: counted as two floats
    CommHandle h = new_handle(comm, COMM_ALL_REDUCE, COMM_SUM, NULL, 0, 2, DTYPE_FP32);
    double sum = value;
    comm->backend->host->start_sum_double(comm, &h, &sum);
    finish(comm, comm->backend->host, &h);
    return sum;
}

// ---- the uncounted host helpers: the backend's (mpi.c's, on the group's own communicator) ----

double comm_metric_average(Comm *comm, double value) {
    if (comm->backend == &comm_sim_backend) return value;  // every simulated rank alike
    // every rank's value, summed in rank order: the same bits on every rank and
    // in every run, whatever MPI's reduction algorithm (train_single --as-ranks)
    double *values = xcalloc((size_t)comm->world, sizeof *values), sum = 0;
    comm->backend->host->all_gather_double(comm, value, values);
    for (int r = 0; r < comm->world; r++) sum += values[r];
    free(values);
    return sum / comm->world;
}

double comm_metric_max(Comm *comm, double value) {
    if (comm->backend == &comm_sim_backend) return value;  // every simulated rank alike
    return comm->backend->host->max_double(comm, value);
}

void *comm_metric_gather(Comm *comm, const void *bytes, size_t count, size_t **counts) {
    CHECK(comm->backend != &comm_sim_backend, "comm_metric_gather: the simulated network has no other ranks to gather");
    return comm->backend->host->gather_bytes(comm, bytes, count, counts);
}

void comm_record(Comm *comm, int on) {
    if (on && !comm->log) comm->log = xcalloc(1, sizeof(CommLog));
    if (on || !comm->log) return;
    comm_clear_records(comm);
    free(comm->log->records);
    free(comm->log->events);
    free(comm->log);
    comm->log = NULL;
}

const CommRecord *comm_records(Comm *comm, size_t *count) {
    CommLog *log = comm->log;
    *count = log ? log->count : 0;
    if (!log) return NULL;
    if (comm->backend->event_times) comm->backend->event_times(comm, log->events, log->records, log->count);
    return log->records;
}

void comm_clear_records(Comm *comm) {
    CommLog *log = comm->log;
    if (!log) return;
    for (size_t i = 0; i < log->count; i++)
        if (log->events[i]) comm->backend->event_free(log->events[i]);
    log->count = 0;
}

void comm_stats_reset(Comm *comm) {
    memset(&comm->stats, 0, sizeof comm->stats);
    memset(&comm->across, 0, sizeof comm->across);
}

CommStats comm_stats_diff(const CommStats *after, const CommStats *before) {
    CommStats d;
    for (int i = 0; i < COMM_NUM_OPS; i++) {
        d.ops[i].calls = after->ops[i].calls - before->ops[i].calls;
        d.ops[i].elements = after->ops[i].elements - before->ops[i].elements;
        d.ops[i].bytes_sent = after->ops[i].bytes_sent - before->ops[i].bytes_sent;
        d.ops[i].bytes_recv = after->ops[i].bytes_recv - before->ops[i].bytes_recv;
        d.ops[i].node_calls = after->ops[i].node_calls - before->ops[i].node_calls;
        d.ops[i].node_bytes_in = after->ops[i].node_bytes_in - before->ops[i].node_bytes_in;
        d.ops[i].node_bytes_out = after->ops[i].node_bytes_out - before->ops[i].node_bytes_out;
        d.ops[i].seconds = after->ops[i].seconds - before->ops[i].seconds;
    }
    return d;
}
