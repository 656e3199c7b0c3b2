// comm.c: argument checks, accounting, and the MPI engine for host buffers.
// Device buffers go to comm_nccl.cu (GPU build).
//
// The engine (one per Comm: the world, and each group comm_split makes) is the
// CPU's analogue of a CUDA stream: a queue of collectives and a thread that runs
// them one at a time, in the order they were started, on a duplicate of the
// group's communicator that nothing else uses (two groups' collectives order
// among themselves, each on its own engine):
//
//   compute thread:  start(u3) start(u2) ...compute...       wait(u3) wait(u2)
//   engine thread:       [ all-reduce u3 ][ all-reduce u2 ]
//
// The thread tests the running collective with MPI_Test and pauses between
// tests (doubling the pause, up to ENGINE_MAX_PAUSE) while the rank computes, so
// that it takes little of the cores the compute threads use; while the rank is
// blocked in comm_wait, its core is free and the thread tests back to back.
// SHARDLAB_COMM_ENGINE=spin makes it wait in MPI_Wait instead (Open MPI spins a
// core there) and =inline runs collectives on the calling thread, as MPI alone
// does: both for comparison (bench_comm --overlap-ms).
// Reductions among ranks of one node go through the node's shared memory instead
// of MPI's reduction path (comm_node.c), on the same thread, unless
// SHARDLAB_COMM_REDUCE=mpi or the engine runs inline (no thread, no arena): every
// size, so that every element is summed in rank order 0, 1, ..., N-1 and a run
// is the same bits as train_single --as-ranks N (docs/testing.md).
// The uncounted helpers (comm_metric_*, the debug checks) stay on the calling
// thread on the group's own communicator (MPI_COMM_WORLD, or comm_split's):
// another communicator than the engine's, so their order is independent.
#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"
#include "comm_node.h"
#include "comm_sim.h"
#include "step_time.h"
#include "device.h"
#include "fatal_once.h"
#include "mpi_check.h"
#include "util/errors.h"
#include "util/timer.h"


#define PTHREAD_CHECK(call)                                                                         \
    do {                                                                                            \
        int pthread_status_ = (call);                                                               \
        if (pthread_status_ != 0) fatal_at(__FILE__, __LINE__, "%s: %s", #call, strerror(pthread_status_)); \
    } while (0)

// The engine's pauses between two tests of a collective while the rank computes:
// the first, and the longest it doubles to.
#define ENGINE_FIRST_PAUSE 10e-6
#define ENGINE_MAX_PAUSE 1e-3

// One collective as MPI sees it.
typedef struct EngineOp {
    CommOp op;
    DType dtype;            // of the elements (comm_all_reduce_double: fp32, two per double)
    int node;               // 1: through the node's shared memory (comm_node.h), not MPI's own
    MPI_Datatype type;      // MPI_FLOAT, MPI_UINT16_T for bf16, or MPI_DOUBLE for comm_all_reduce_double
    MPI_Op sum;             // MPI_SUM, or the engine's bf16_sum
    const void *send;       // MPI_IN_PLACE where the collective works in place
    void *recv;
    int count;              // elements per MPI's convention for the call
    int root;
    MPI_Request request;
    NodeMoved moved;        // node reductions: the bytes that crossed, once complete
    int complete;           // engine thread: written under the engine's lock
    double done;            // timer_now() at completion
    struct EngineOp *next;  // the queue
} EngineOp;

struct CommEngine {
    MPI_Comm comm;          // a duplicate of the group's communicator, for the engine alone
    MPI_Comm group;         // the group's: MPI_COMM_WORLD, or the one comm_split made (checks, metrics)
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;    // to the thread: work queued, a caller waits, or stop
    pthread_cond_t done;    // to callers: a collective completed
    EngineOp *head, *tail;  // started, not yet begun by the thread
    int waiters;            // callers blocked in comm_wait
    int stop;
    int spin;               // SHARDLAB_COMM_ENGINE=spin: MPI_Wait, no pauses
    MPI_Op bf16_sum;        // MPI knows no bf16: the sum of bf16 elements (bf16_sum below)
    NodeArena *node;        // the group's shared memory for reductions, or NULL (not on one node, inline)
};

// The records kept for the trace; events[i] is record i's NCCL completion event
// until comm_records reads its time (NULL for MPI).
struct CommLog {
    CommRecord *records;
    void **events;
    size_t count, capacity;
};
#define COMM_LOG_MAX 65536

const char *const comm_op_names[COMM_NUM_OPS] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier",
};

// ---- the engine ----

// MPI's user function for summing bf16 (sent as MPI_UINT16_T): in += inout
// element by element, each sum in fp32 rounded to bf16.
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const bf16 *a = in;
    bf16 *b = inout;
    for (int i = 0; i < *len; i++) b[i] = bf16_add(a[i], b[i]);
}

static void issue(MPI_Comm comm, EngineOp *o) {
    switch (o->op) {
    case COMM_ALL_REDUCE:
        MPI_CHECK(MPI_Iallreduce(o->send, o->recv, o->count, o->type, o->sum, comm, &o->request));
        break;
    case COMM_REDUCE_SCATTER:
        MPI_CHECK(MPI_Ireduce_scatter_block(o->send, o->recv, o->count, o->type, o->sum, comm, &o->request));
        break;
    case COMM_ALL_GATHER:
        MPI_CHECK(MPI_Iallgather(o->send, o->count, o->type, o->recv, o->count, o->type, comm, &o->request));
        break;
    case COMM_BROADCAST: MPI_CHECK(MPI_Ibcast(o->recv, o->count, o->type, o->root, comm, &o->request)); break;
    case COMM_REDUCE:
        MPI_CHECK(MPI_Ireduce(o->send, o->recv, o->count, o->type, o->sum, o->root, comm, &o->request));
        break;
    case COMM_BARRIER: MPI_CHECK(MPI_Ibarrier(comm, &o->request)); break;
    default: fatal("comm: %d is not a collective", (int)o->op);
    }
}

// Waits on cond for at most `seconds` (cond uses the monotonic clock).
static void timed_wait(pthread_cond_t *cond, pthread_mutex_t *lock, double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    long ns = t.tv_nsec + (long)(seconds * 1e9);
    t.tv_sec += ns / 1000000000L;
    t.tv_nsec = ns % 1000000000L;
    int status = pthread_cond_timedwait(cond, lock, &t);
    if (status != 0 && status != ETIMEDOUT) fatal_at(__FILE__, __LINE__, "pthread_cond_timedwait: %s", strerror(status));
}

// Waits for one MPI request on the engine's thread, without the lock. Open MPI
// moves a collective forward only inside MPI calls, and a blocking call spins a
// core until the collective ends, however long the other ranks take to reach
// it. So the thread tests and pauses in between while the rank computes (the
// pause doubles: a late rank costs few tests), and tests back to back only while
// a caller is blocked in comm_wait, whose core is idle then.
static void engine_progress(void *engine, MPI_Request *request) {
    CommEngine *e = engine;
    if (e->spin) {
        MPI_CHECK(MPI_Wait(request, MPI_STATUS_IGNORE));
        return;
    }
    double pause = ENGINE_FIRST_PAUSE;
    for (int done = 0; !done;) {
        MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
        if (done) break;
        PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
        if (!e->waiters) {
            timed_wait(&e->wake, &e->lock, pause);
            pause = 2 * pause < ENGINE_MAX_PAUSE ? 2 * pause : ENGINE_MAX_PAUSE;
        }
        PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
    }
}

// Carries one collective to completion; called and returns with the lock held.
// A node reduction's copies and sums run on this thread, between its barriers.
static void engine_run(CommEngine *e, EngineOp *o) {
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
    if (o->node) {
        const void *in = o->send == MPI_IN_PLACE ? o->recv : o->send;
        node_reduce(e->node, o->op, in, o->recv, (size_t)o->count, o->dtype, o->root, &o->moved, engine_progress,
                    e);
    } else {
        issue(e->comm, o);
        engine_progress(e, &o->request);
    }
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    o->done = timer_now();
    o->complete = 1;
    PTHREAD_CHECK(pthread_cond_broadcast(&e->done));
}

// The engine's thread: the queue's collectives in order, until comm_finalize
// asks it to stop and the queue is empty.
static void *engine_main(void *arg) {
    CommEngine *e = arg;
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    for (;;) {
        while (!e->head && !e->stop) PTHREAD_CHECK(pthread_cond_wait(&e->wake, &e->lock));
        EngineOp *o = e->head;
        if (!o) break;
        e->head = o->next;
        if (!e->head) e->tail = NULL;
        engine_run(e, o);  // o belongs to its waiter once complete: not touched again
    }
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
    return NULL;
}

static CommEngine *engine_start(MPI_Comm group, int threaded, int spin) {
    CommEngine *e = xcalloc(1, sizeof *e);
    e->group = group;
    MPI_CHECK(MPI_Comm_dup(group, &e->comm));
    MPI_CHECK(MPI_Op_create(bf16_sum, 1, &e->bf16_sum));
    MPI_CHECK(MPI_Comm_set_errhandler(e->comm, MPI_ERRORS_RETURN));
    e->spin = spin;
    if (!threaded) return e;
    e->node = node_arena_create(group);
    pthread_condattr_t monotonic;
    PTHREAD_CHECK(pthread_condattr_init(&monotonic));
    PTHREAD_CHECK(pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC));
    PTHREAD_CHECK(pthread_cond_init(&e->wake, &monotonic));
    PTHREAD_CHECK(pthread_condattr_destroy(&monotonic));
    PTHREAD_CHECK(pthread_cond_init(&e->done, NULL));
    PTHREAD_CHECK(pthread_mutex_init(&e->lock, NULL));
    // signals are for the compute thread (the trainers' stop flag): the engine's
    // thread starts with all of them blocked
    sigset_t all, before;
    sigfillset(&all);
    PTHREAD_CHECK(pthread_sigmask(SIG_SETMASK, &all, &before));
    PTHREAD_CHECK(pthread_create(&e->thread, NULL, engine_main, e));
    PTHREAD_CHECK(pthread_sigmask(SIG_SETMASK, &before, NULL));
    return e;
}

static void engine_stop(Comm *comm) {
    CommEngine *e = comm->engine;
    if (!e) return;
    if (comm->engine_thread) {
        PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
        e->stop = 1;
        PTHREAD_CHECK(pthread_cond_signal(&e->wake));
        PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
        PTHREAD_CHECK(pthread_join(e->thread, NULL));
        PTHREAD_CHECK(pthread_cond_destroy(&e->wake));
        PTHREAD_CHECK(pthread_cond_destroy(&e->done));
        PTHREAD_CHECK(pthread_mutex_destroy(&e->lock));
    }
    node_arena_free(e->node);
    MPI_CHECK(MPI_Comm_free(&e->comm));
    MPI_CHECK(MPI_Op_free(&e->bf16_sum));
    free(e);
    comm->engine = NULL;
}

// MPI counts are ints.
static int mpi_count(CommOp op, size_t count) {
    if (count > INT_MAX) fatal("%s: %zu elements is more than an MPI call takes (%d)", comm_op_names[op], count, INT_MAX);
    return (int)count;
}

// Queues the collective (or, without the thread, starts it here); h->request
// becomes the engine's operation.
static void engine_submit(Comm *comm, CommHandle *h, EngineOp op) {
    EngineOp *o = xmalloc(sizeof *o);
    *o = op;
    if (o->type == MPI_DOUBLE) o->node = 0;  // comm_all_reduce_double: MPI's sum of one double
    o->complete = 0;
    o->next = NULL;
    h->request = o;
    CommEngine *e = comm->engine;
    if (!comm->engine_thread) {
        issue(e->comm, o);
        return;
    }
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    if (e->tail) e->tail->next = o;
    else e->head = o;
    e->tail = o;
    PTHREAD_CHECK(pthread_cond_signal(&e->wake));
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
}

static void engine_wait(Comm *comm, EngineOp *o) {
    CommEngine *e = comm->engine;
    if (!comm->engine_thread) {
        if (!o->complete) MPI_CHECK(MPI_Wait(&o->request, MPI_STATUS_IGNORE));
        if (!o->complete) o->done = timer_now();
        o->complete = 1;
        return;
    }
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    if (!o->complete) {
        e->waiters++;
        PTHREAD_CHECK(pthread_cond_signal(&e->wake));  // end the thread's pause: test now
        while (!o->complete) PTHREAD_CHECK(pthread_cond_wait(&e->done, &e->lock));
        e->waiters--;
    }
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
}

// ---- setup ----

void comm_init(Comm *comm, int *argc, char ***argv) {
    memset(comm, 0, sizeof *comm);
    const char *mode = getenv("SHARDLAB_COMM_ENGINE");
    if (!mode || !*mode) mode = "thread";
    if (strcmp(mode, "thread") != 0 && strcmp(mode, "spin") != 0 && strcmp(mode, "inline") != 0)
        fatal("SHARDLAB_COMM_ENGINE is '%s': give thread, spin or inline", mode);
    int threaded = strcmp(mode, "inline") != 0;
    int initialized, provided;
    MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
        if (threaded) MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
        else MPI_CHECK(MPI_Init(argc, argv));
        comm->started_mpi = 1;
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &comm->world));
    fatal_once_install(comm->rank, comm->world);
    MPI_CHECK(MPI_Query_thread(&provided));
    if (threaded && provided < MPI_THREAD_MULTIPLE) {
        threaded = 0;
        if (comm->rank == 0)
            printf("comm: this MPI library does not give MPI_THREAD_MULTIPLE: collectives run on the calling "
                   "thread and advance only inside MPI calls\n");
    }
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &comm->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &comm->local_size));
    MPI_CHECK(MPI_Comm_free(&node));
    const char *debug = getenv("SHARDLAB_COMM_DEBUG");
    comm->debug_checks = debug && strcmp(debug, "0") != 0;
    const char *reduce = getenv("SHARDLAB_COMM_REDUCE");
    if (reduce && strcmp(reduce, "node") != 0 && strcmp(reduce, "mpi") != 0)
        fatal("SHARDLAB_COMM_REDUCE is '%s': give node or mpi", reduce);
    comm->node_reductions = !reduce || strcmp(reduce, "node") == 0;
    comm->backend = COMM_BACKEND_MPI;
    comm->engine_thread = threaded;
    comm->engine = engine_start(MPI_COMM_WORLD, threaded, strcmp(mode, "spin") == 0);
}

void comm_init_simulated(Comm *comm, int rank, int world, SimClock *clock) {
    memset(comm, 0, sizeof *comm);
    comm->rank = rank;
    comm->world = world;
    comm->local_size = 1;
    comm->backend = COMM_BACKEND_SIM;
    comm->sim = xcalloc(1, sizeof *comm->sim);
    *comm->sim = (CommSim){.clock = clock, .first = 0, .stride = 1};
}

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
    if (parent->backend == COMM_BACKEND_SIM) {
        group->rank = (r - first) / stride;
        group->world = size;
        group->local_size = 1;
        comm_sim_split(parent, group, first, stride);
        return;
    }
    int color = first, key = r;
    MPI_Comm split;
    MPI_CHECK(MPI_Comm_split(parent->engine->group, color, key, &split));
    MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(split, &group->rank));
    MPI_CHECK(MPI_Comm_size(split, &group->world));
    group->local_rank = parent->local_rank;
    group->local_size = parent->local_size;
    group->staged = parent->staged;
    group->debug_checks = parent->debug_checks;
    group->node_reductions = parent->node_reductions;
    group->engine_thread = parent->engine_thread;
    group->engine = engine_start(split, parent->engine_thread, parent->engine->spin);
    if (parent->backend == COMM_BACKEND_NCCL) comm_nccl_split(parent, group, color, key);
}

void comm_free_group(Comm *group) {
    CHECK(group->parent, "comm_free_group: rank %d's group was not made by comm_split", group->rank);
    comm_record(group, 0);
    if (group->backend == COMM_BACKEND_SIM) {
        comm_sim_free(group);
        memset(group, 0, sizeof *group);
        return;
    }
    if (group->backend == COMM_BACKEND_NCCL) comm_nccl_free(group);
    MPI_Comm split = group->engine->group;
    engine_stop(group);
    MPI_CHECK(MPI_Comm_free(&split));
    memset(group, 0, sizeof *group);
}

void comm_finalize(Comm *comm) {
    comm_record(comm, 0);
    if (comm->backend == COMM_BACKEND_SIM) {
        comm_sim_free(comm);
        return;
    }
    if (comm->backend == COMM_BACKEND_NCCL) comm_nccl_free(comm);
    engine_stop(comm);
    if (comm->started_mpi) {
        fatal_once_uninstall();
        MPI_CHECK(MPI_Finalize());
    }
    comm->started_mpi = 0;
}

int comm_node_shared(const Comm *comm) { return comm->engine && comm->engine->node != NULL; }

void comm_use_device_buffers(Comm *comm, int gpus_on_node) {
    if (comm->local_size > gpus_on_node) {
        comm->staged = 1;
        if (comm->rank == 0)
            printf("comm: %d ranks share %d GPU(s) on a node: collectives run on MPI, staged through pinned "
                   "host memory (NCCL needs a GPU per rank)\n", comm->local_size, gpus_on_node);
        return;
    }
    comm_nccl_init(comm);
    comm->backend = COMM_BACKEND_NCCL;
    if (comm->rank == 0) printf("comm: NCCL, one GPU per rank\n");
}

// Staged MPI: copy the device input to a pinned host buffer, run MPI there, and
// copy the result back in comm_wait. *send and *recv are redirected to the host
// copies; in-place collectives (send == recv) share one.
static void stage(Comm *comm, CommHandle *h, const void **send, size_t send_count, void **recv,
                  size_t recv_count) {
    if (!comm->staged) return;
    int in_place = *send == *recv;
    size_t size = dtype_size(h->dtype);
    h->staged_send = device_host_alloc(send_count * size);
    if (*send) device_to_host_as(h->staged_send, *send, send_count, h->dtype);
    h->staged_recv = in_place ? h->staged_send : (*recv ? device_host_alloc(recv_count * size) : NULL);
    h->device_recv = *recv;
    h->staged_recv_count = *recv ? recv_count : 0;
    if (h->result) h->result = h->staged_recv;
    *send = h->staged_send;
    *recv = h->staged_recv;
}

static void unstage(CommHandle *h) {
    if (!h->staged_send) return;
    if (h->device_recv) device_from_host_as(h->device_recv, h->staged_recv, h->staged_recv_count, h->dtype);
    if (h->staged_recv != h->staged_send) device_host_free(h->staged_recv);
    device_host_free(h->staged_send);
    h->staged_send = h->staged_recv = h->device_recv = NULL;
}

// The ring and chain formulas of comm.h for a buffer of S bytes.
static void ring_bytes(CommOp op, uint64_t S, int rank, int world, int root, uint64_t *sent, uint64_t *recv) {
    uint64_t N = (uint64_t)world;
    *sent = *recv = 0;
    if (world == 1) return;
    switch (op) {
    case COMM_ALL_REDUCE: *sent = *recv = 2 * (N - 1) * S / N; break;
    case COMM_REDUCE_SCATTER:
    case COMM_ALL_GATHER: *sent = *recv = (N - 1) * S / N; break;
    case COMM_BROADCAST:
        *sent = (rank == (root + world - 1) % world) ? 0 : S;  // the chain's last only receives
        *recv = rank == root ? 0 : S;
        break;
    case COMM_REDUCE:
        *sent = rank == root ? 0 : S;
        *recv = (rank == (root + 1) % world) ? 0 : S;  // the chain starts after the root
        break;
    default: break;
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

// The engine's form of an element type and its sum. Reductions go through the
// node's shared memory where the group has it (comm_node.h), whatever their size.
static EngineOp engine_op(const Comm *comm, CommOp op, DType dtype) {
    int bf = dtype == DTYPE_BF16;
    int reduction = op == COMM_ALL_REDUCE || op == COMM_REDUCE_SCATTER || op == COMM_REDUCE;
    return (EngineOp){.op = op, .dtype = dtype, .node = reduction && comm->node_reductions && comm->engine->node,
                      .type = bf ? MPI_UINT16_T : MPI_FLOAT, .sum = bf ? comm->engine->bf16_sum : MPI_SUM};
}

// The bytes of one element as the backend carries it: on MPI the size of the
// datatype the engine hands to MPI (an element widened on the wire shows in the
// counters), on NCCL (and the simulated network) the dtype's own.
static size_t wire_element_bytes(const Comm *comm, DType dtype) {
    if (comm->backend != COMM_BACKEND_MPI) return dtype_size(dtype);
    int bytes;
    MPI_CHECK(MPI_Type_size(engine_op(comm, COMM_BARRIER, dtype).type, &bytes));
    return (size_t)bytes;
}

// Into the group's counters and those of every group it was split from.
static void count_call(Comm *comm, CommOp op, size_t count, DType dtype, int root) {
    uint64_t sent, recv;
    ring_bytes(op, (uint64_t)count * wire_element_bytes(comm, dtype), comm->rank, comm->world, root, &sent, &recv);
    for (Comm *c = comm; c; c = c->parent) {
        add_call(&c->stats, op, count, sent, recv);
        if (comm->is_across) add_call(&c->across, op, count, sent, recv);
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

static void count_moved(Comm *comm, CommOp op, NodeMoved moved) {
    for (Comm *c = comm; c; c = c->parent) {
        add_moved(&c->stats.ops[op], moved);
        if (comm->is_across) add_moved(&c->across.ops[op], moved);
    }
}

// Debug mode: every rank compares its arguments with everyone else's before the
// collective starts, so a mismatch becomes the same clear error on all ranks
// instead of a hang or a silent corruption.
static void check_arguments(Comm *comm, CommOp op, size_t count, DType dtype, int root, int buffers_ok) {
    int root_ok = root >= 0 && root < comm->world;
    int divisible = !((op == COMM_REDUCE_SCATTER || op == COMM_ALL_GATHER) && count % (size_t)comm->world);
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
    MPI_CHECK(MPI_Allreduce(mine, lo, 6, MPI_LONG_LONG, MPI_MIN, comm->engine->group));
    MPI_CHECK(MPI_Allreduce(mine, hi, 6, MPI_LONG_LONG, MPI_MAX, comm->engine->group));
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

static CommHandle new_handle(CommOp op, CommReduceOp reduce_op, void *result, size_t result_count, size_t count,
                             DType dtype) {
    CommHandle h = {.active = 1, .op = op, .reduce_op = reduce_op, .dtype = dtype, .result = result,
                    .result_count = reduce_op == COMM_AVG ? result_count : 0, .count = count,
                    .issued = timer_now()};
    return h;
}


// MPI_IN_PLACE where a collective reads and writes the same buffer.
CommHandle comm_all_reduce_start(Comm *comm, void *buf, size_t count, DType dtype, CommReduceOp op) {
    check_arguments(comm, COMM_ALL_REDUCE, count, dtype, 0, buf != NULL);
    count_call(comm, COMM_ALL_REDUCE, count, dtype, 0);
    CommHandle h = new_handle(COMM_ALL_REDUCE, op, buf, count, count, dtype);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, buf, buf, count, 0);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_start(comm, h);
    const void *in = buf;
    stage(comm, &h, &in, count, &buf, count);
    EngineOp o = engine_op(comm, COMM_ALL_REDUCE, dtype);
    o.send = MPI_IN_PLACE;
    o.recv = buf;
    o.count = mpi_count(COMM_ALL_REDUCE, count);
    engine_submit(comm, &h, o);
    return h;
}

CommHandle comm_reduce_scatter_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype,
                                     CommReduceOp op) {
    check_arguments(comm, COMM_REDUCE_SCATTER, count, dtype, 0, send && recv);
    count_call(comm, COMM_REDUCE_SCATTER, count, dtype, 0);
    size_t part = count / (size_t)comm->world;
    CommHandle h = new_handle(COMM_REDUCE_SCATTER, op, recv, part, count, dtype);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, 0);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_start(comm, h);
    stage(comm, &h, &send, count, &recv, part);
    EngineOp o = engine_op(comm, COMM_REDUCE_SCATTER, dtype);
    o.send = send;
    o.recv = recv;
    o.count = mpi_count(COMM_REDUCE_SCATTER, part);
    engine_submit(comm, &h, o);
    return h;
}

CommHandle comm_all_gather_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype) {
    check_arguments(comm, COMM_ALL_GATHER, count, dtype, 0, send && recv);
    count_call(comm, COMM_ALL_GATHER, count, dtype, 0);
    size_t part = count / (size_t)comm->world;
    CommHandle h = new_handle(COMM_ALL_GATHER, COMM_SUM, recv, 0, count, dtype);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, 0);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_start(comm, h);
    stage(comm, &h, &send, part, &recv, count);
    EngineOp o = engine_op(comm, COMM_ALL_GATHER, dtype);
    o.send = send;
    o.recv = recv;
    o.count = mpi_count(COMM_ALL_GATHER, part);
    engine_submit(comm, &h, o);
    return h;
}

CommHandle comm_broadcast_start(Comm *comm, void *buf, size_t count, DType dtype, int root) {
    check_arguments(comm, COMM_BROADCAST, count, dtype, root, buf != NULL);
    count_call(comm, COMM_BROADCAST, count, dtype, root);
    CommHandle h = new_handle(COMM_BROADCAST, COMM_SUM, buf, 0, count, dtype);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, buf, buf, count, root);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_start(comm, h);
    const void *in = buf;
    stage(comm, &h, &in, count, &buf, count);
    EngineOp o = engine_op(comm, COMM_BROADCAST, dtype);
    o.recv = buf;
    o.count = mpi_count(COMM_BROADCAST, count);
    o.root = root;
    engine_submit(comm, &h, o);
    return h;
}

CommHandle comm_reduce_start(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root,
                             CommReduceOp op) {
    int is_root = comm->rank == root;
    check_arguments(comm, COMM_REDUCE, count, dtype, root, send && (recv || !is_root));
    count_call(comm, COMM_REDUCE, count, dtype, root);
    CommHandle h = new_handle(COMM_REDUCE, op, recv, is_root ? count : 0, count, dtype);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, root);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_start(comm, h);
    stage(comm, &h, &send, count, &recv, count);
    EngineOp o = engine_op(comm, COMM_REDUCE, dtype);
    // the root may reduce in place (send == recv), which MPI spells MPI_IN_PLACE
    o.send = is_root && send == recv ? MPI_IN_PLACE : send;
    o.recv = recv;
    o.count = mpi_count(COMM_REDUCE, count);
    o.root = root;
    engine_submit(comm, &h, o);
    return h;
}

// Keeps the record of a collective just waited for, when recording; an NCCL
// event stays with it until comm_records reads its time.
// A group's records go to the nearest group above it that keeps them (the trace
// attaches the world's).
static void keep_record(Comm *comm, const CommHandle *h, double waited, double done, void *event) {
    CommLog *log = comm->log;
    for (Comm *c = comm->parent; !log && c; c = c->parent) log = c->log;
    if (!log) {
        if (event) comm_nccl_event_free(event);
        return;
    }
    if (log->count == COMM_LOG_MAX) {  // nobody took them: drop the older half
        size_t half = COMM_LOG_MAX / 2;
        for (size_t i = 0; i < half; i++)
            if (log->events[i]) comm_nccl_event_free(log->events[i]);
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
    log->records[log->count] = (CommRecord){.op = h->op, .count = h->count, .issued = h->issued, .done = done,
                                            .waited = waited};
    log->events[log->count++] = event;
}

// x *= factor on host elements (bf16: in fp32, rounded).
static void host_scale(void *x, size_t count, DType dtype, float factor) {
    if (dtype == DTYPE_FP32) {
        float *f = x;
        for (size_t i = 0; i < count; i++) f[i] *= factor;
        return;
    }
    bf16 *b = x;
    for (size_t i = 0; i < count; i++) b[i] = bf16_scale(b[i], factor);
}

// Finishes a collective the engine carries: the wait, the average, the copy back
// to the device (staged), the record.
static void engine_finish(Comm *comm, CommHandle *h) {
    double waited = timer_now();
    EngineOp *o = h->request;
    engine_wait(comm, o);
    if (o->node) count_moved(comm, h->op, o->moved);
    // MPI has no average: sum, then divide by the number of ranks.
    float scale = 1.0f / (float)comm->world;
    if (h->result_count > 0) host_scale(h->result, h->result_count, h->dtype, scale);
    unstage(h);
    keep_record(comm, h, waited, o->done, NULL);
    free(o);
    h->request = NULL;
    h->active = 0;
    count_wait(comm, h->op, timer_now() - waited);
}

// The simulated network's wait: on its clock; what compute waited counts as such.
static void sim_finish(Comm *comm, CommHandle *h) {
    double waited = comm->sim->clock->now;
    comm_sim_wait(comm, h);
    h->active = 0;
    count_wait(comm, h->op, comm->sim->clock->now - waited);
}

void comm_wait(Comm *comm, CommHandle *h) {
    if (!h->active) return;
    if (comm->backend == COMM_BACKEND_SIM) {
        sim_finish(comm, h);
        return;
    }
    if (comm->backend == COMM_BACKEND_MPI) {
        engine_finish(comm, h);
        return;
    }
    double waited = timer_now();
    comm_nccl_wait(comm, h);  // the compute stream waits for the collective; the host does not
    keep_record(comm, h, waited, 0.0, h->request);
    h->request = NULL;
    h->active = 0;
    count_wait(comm, h->op, timer_now() - waited);
}

void comm_progress(Comm *comm, CommHandle *h) {
    if (!h->active || comm->backend != COMM_BACKEND_MPI || comm->engine_thread) return;
    EngineOp *o = h->request;
    if (o->complete) return;
    int done;
    MPI_CHECK(MPI_Test(&o->request, &done, MPI_STATUS_IGNORE));
    if (done) {
        o->done = timer_now();
        o->complete = 1;
    }
}

int comm_test(Comm *comm, CommHandle *h) {
    if (!h->active) return 1;
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_test(h->request);
    if (comm->backend == COMM_BACKEND_SIM) return comm_sim_test(comm, h);
    EngineOp *o = h->request;
    if (!comm->engine_thread) {
        comm_progress(comm, h);
        return o->complete;
    }
    CommEngine *e = comm->engine;
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    int complete = o->complete;
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
    return complete;
}

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

void comm_broadcast(Comm *comm, void *buf, size_t count, DType dtype, int root) {
    CommHandle h = comm_broadcast_start(comm, buf, count, dtype, root);
    comm_wait(comm, &h);
}

void comm_reduce(Comm *comm, const void *send, void *recv, size_t count, DType dtype, int root, CommReduceOp op) {
    CommHandle h = comm_reduce_start(comm, send, recv, count, dtype, root, op);
    comm_wait(comm, &h);
}

// The barrier and the double all-reduce are host collectives whatever the
// backend: they go through the engine too, in order with the others.
void comm_barrier(Comm *comm) {
    check_arguments(comm, COMM_BARRIER, 0, DTYPE_FP32, 0, 1);
    count_call(comm, COMM_BARRIER, 0, DTYPE_FP32, 0);
    CommHandle h = new_handle(COMM_BARRIER, COMM_SUM, NULL, 0, 0, DTYPE_FP32);
    if (comm->backend == COMM_BACKEND_SIM) {
        sim_finish(comm, &h);
        return;
    }
    engine_submit(comm, &h, (EngineOp){.op = COMM_BARRIER});
    engine_finish(comm, &h);
}

double comm_all_reduce_double(Comm *comm, double value) {
    check_arguments(comm, COMM_ALL_REDUCE, 2, DTYPE_FP32, 0, 1);
    count_call(comm, COMM_ALL_REDUCE, 2, DTYPE_FP32, 0);  // 8 bytes: counted as two floats
    CommHandle h = new_handle(COMM_ALL_REDUCE, COMM_SUM, NULL, 0, 2, DTYPE_FP32);
    if (comm->backend == COMM_BACKEND_SIM) {  // every simulated rank alike: N times this one's
        h = comm_sim_start(comm, h);
        sim_finish(comm, &h);
        return value * comm->world;
    }
    double sum = value;
    engine_submit(comm, &h, (EngineOp){.op = COMM_ALL_REDUCE, .type = MPI_DOUBLE, .sum = MPI_SUM, .send = MPI_IN_PLACE,
                                       .recv = &sum, .count = 1});
    engine_finish(comm, &h);
    return sum;
}

double comm_metric_average(Comm *comm, double value) {
    if (comm->backend == COMM_BACKEND_SIM) return value;
    // every rank's value, summed in rank order: the same bits on every rank and
    // in every run, whatever MPI's reduction algorithm (train_single --as-ranks)
    double *values = xcalloc((size_t)comm->world, sizeof *values), sum = 0;
    MPI_CHECK(MPI_Allgather(&value, 1, MPI_DOUBLE, values, 1, MPI_DOUBLE, comm->engine->group));
    for (int r = 0; r < comm->world; r++) sum += values[r];
    free(values);
    return sum / comm->world;
}

double comm_metric_max(Comm *comm, double value) {
    if (comm->backend == COMM_BACKEND_SIM) return value;
    double max;
    MPI_CHECK(MPI_Allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, comm->engine->group));
    return max;
}

void *comm_metric_gather(Comm *comm, const void *bytes, size_t count, size_t **counts) {
    CHECK(comm->backend != COMM_BACKEND_SIM, "comm_metric_gather: the simulated network has no other ranks to gather");
    int mine = (int)count;
    int *sizes = comm->rank == 0 ? xcalloc((size_t)comm->world, sizeof(int)) : NULL;
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, sizes, 1, MPI_INT, 0, comm->engine->group));
    int *displs = NULL;
    char *all = NULL;
    if (comm->rank == 0) {
        displs = xcalloc((size_t)comm->world, sizeof(int));
        *counts = xcalloc((size_t)comm->world, sizeof(size_t));
        size_t total = 0;
        for (int r = 0; r < comm->world; r++) {
            displs[r] = (int)total;
            (*counts)[r] = (size_t)sizes[r];
            total += (size_t)sizes[r];
        }
        all = xmalloc(total);
    }
    MPI_CHECK(MPI_Gatherv(bytes, mine, MPI_BYTE, all, sizes, displs, MPI_BYTE, 0, comm->engine->group));
    free(sizes);
    free(displs);
    return all;
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
    if (comm->backend == COMM_BACKEND_NCCL) comm_nccl_event_times(comm, log->events, log->records, log->count);
    return log->records;
}

void comm_clear_records(Comm *comm) {
    CommLog *log = comm->log;
    if (!log) return;
    for (size_t i = 0; i < log->count; i++)
        if (log->events[i]) comm_nccl_event_free(log->events[i]);
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
