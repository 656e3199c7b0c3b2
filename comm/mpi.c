// mpi.c: the MPI backend (comm/backend.h): host buffers, on an engine of the
// group's own. (Device buffers go to comm/nccl.cu, one GPU per rank, or here
// staged through pinned host memory when ranks share a GPU.)
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
// of MPI's reduction path (comm/node.c), on the same thread, unless
// SHARDLAB_COMM_REDUCE=mpi or the engine runs inline (no thread, no arena): every
// size, so that every element is summed in rank order 0, 1, ..., N-1 and a run
// is the same bits as train_single --as-ranks N (docs/testing.md).
// The uncounted helpers (comm_metric_*, the debug checks) stay on the calling
// thread on the group's own communicator (MPI_COMM_WORLD, or comm_split's):
// another communicator than the engine's, so their order is independent.
#include "comm/mpi_backend.h"

#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/fatal_once.h"
#include "comm/mpi_check.h"
#include "comm/node.h"
#include "device/device.h"
#include "util/errors.h"
#include "util/timer.h"

#define PTHREAD_CHECK(call)                                                                         \
    do {                                                                                            \
        int pthread_status_ = (call);                                                               \
        if (pthread_status_ != 0) fatal_at(__FILE__, __LINE__, "%s: %s", #call, strerror(pthread_status_)); \
    } while (0)

// The engine's pauses between two tests of a collective while the rank computes:
// the first, and the longest it doubles to. While a caller waits, the thread tests
// back to back for ENGINE_SPIN_BOUND seconds at most, then pauses again: a peer
// that is late because it has no core (more processes than cores) gets this one.
#define ENGINE_FIRST_PAUSE 10e-6
#define ENGINE_MAX_PAUSE 1e-3
#define ENGINE_SPIN_BOUND 300e-6

// One collective as MPI sees it.
typedef struct EngineOp {
    CommOp op;
    DType dtype;            // of the elements (comm_all_reduce_double: fp32, two per double)
    int node;               // 1: through the node's shared memory (comm/node.h), not MPI's own
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
    case COMM_ALL_TO_ALL:
        MPI_CHECK(MPI_Ialltoall(o->send, o->count, o->type, o->recv, o->count, o->type, comm, &o->request));
        break;
    case COMM_GATHER:
        MPI_CHECK(MPI_Igather(o->send, o->count, o->type, o->recv, o->count, o->type, o->root, comm, &o->request));
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
// a caller is blocked in comm_wait, whose core is idle then, for a short bound
// (ENGINE_SPIN_BOUND): a peer that takes longer may be waiting for a core.
static void engine_progress(void *engine, MPI_Request *request) {
    CommEngine *e = engine;
    if (e->spin) {
        MPI_CHECK(MPI_Wait(request, MPI_STATUS_IGNORE));
        return;
    }
    double pause = ENGINE_FIRST_PAUSE, spin_since = 0;  // 0: not testing back to back
    for (int done = 0; !done;) {
        MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
        if (done) break;
        PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
        if (e->waiters && !spin_since) {  // a caller has come to wait: test back to back, then pause afresh
            spin_since = timer_now();
            pause = ENGINE_FIRST_PAUSE;
        }
        if (!e->waiters || timer_now() - spin_since > ENGINE_SPIN_BOUND) {
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

// ---- the backend ----

// Open MPI's shared-memory transport maps one file per rank, in /dev/shm by default, which it removes
// at MPI_Finalize: a rank that exits on a fatal error (fatal_once.c: without MPI_Abort, so that the
// error prints once) or is killed leaves its file there, holding memory until the machine restarts.
// In the job's session directory instead (under TMPDIR; mpirun makes it before the ranks start and
// removes it with everything in it when the job ends, however it ends), nothing outlives the job.
// A directory the user chose (--mca btl_vader_backing_directory) stays theirs.
static void shared_memory_in_session_dir(void) {
    const char *session = getenv("OMPI_MCA_orte_jobfam_session_dir");  // Open MPI 4's mpirun
    if (!session || !*session) session = getenv("PMIX_SERVER_TMPDIR");  // Open MPI 5's prterun
    if (!session || !*session) return;                                  // a singleton: no job to outlive
    const char *transport[] = {"OMPI_MCA_btl_vader_backing_directory", "OMPI_MCA_btl_sm_backing_directory"};
    if (getenv(transport[0]) || getenv(transport[1])) return;  // the user's choice, under either name
    for (int i = 0; i < 2; i++)
        if (setenv(transport[i], session, 0) != 0) fatal("comm: cannot set %s: %s", transport[i], strerror(errno));
}

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
        shared_memory_in_session_dir();
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
    comm->backend = &comm_mpi_backend;
    comm->engine_thread = threaded;
    comm->engine = engine_start(MPI_COMM_WORLD, threaded, strcmp(mode, "spin") == 0);
}

int comm_node_shared(const Comm *comm) { return comm->engine && comm->engine->node != NULL; }

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

// The engine's form of an element type and its sum. Reductions go through the
// node's shared memory where the group has it (comm/node.h), whatever their size.
static EngineOp engine_op(const Comm *comm, CommOp op, DType dtype) {
    int bf = dtype == DTYPE_BF16;
    int reduction = op == COMM_ALL_REDUCE || op == COMM_REDUCE_SCATTER || op == COMM_REDUCE;
    return (EngineOp){.op = op, .dtype = dtype, .node = reduction && comm->node_reductions && comm->engine->node,
                      .type = bf ? MPI_UINT16_T : dtype == DTYPE_INT8 ? MPI_INT8_T : MPI_FLOAT,
                      .sum = bf ? comm->engine->bf16_sum : MPI_SUM};
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

// The size of the datatype the engine hands MPI for an element of `dtype`.
static size_t mpi_element_bytes(const Comm *comm, DType dtype) {
    int bytes;
    MPI_CHECK(MPI_Type_size(engine_op(comm, COMM_BARRIER, dtype).type, &bytes));
    return (size_t)bytes;
}

// Starts a collective on the engine: MPI's arguments for it (MPI_IN_PLACE where
// it reads and writes one buffer; the root may reduce in place), staged through
// host memory when the buffers are a GPU's.
static void mpi_start(Comm *comm, CommHandle *h, const void *send, void *recv, size_t count, int root) {
    size_t part = count / (size_t)comm->world;  // reduce-scatter's output, (all-)gather's input, all-to-all's block
    int gathers = h->op == COMM_ALL_GATHER || h->op == COMM_GATHER;
    size_t in = gathers ? part : count, out = h->op == COMM_REDUCE_SCATTER ? part : count;
    int in_place = h->op == COMM_ALL_REDUCE || h->op == COMM_BROADCAST ||
                   (h->op == COMM_REDUCE && comm->rank == root && send == recv);
    if (h->op != COMM_BARRIER) stage(comm, h, &send, in, &recv, out);
    EngineOp o = engine_op(comm, h->op, h->dtype);
    o.send = in_place ? MPI_IN_PLACE : send;
    o.recv = recv;
    o.count = mpi_count(h->op, h->op == COMM_REDUCE_SCATTER || gathers || h->op == COMM_ALL_TO_ALL ? part : count);
    o.root = root;
    if (h->op == COMM_BARRIER) o = (EngineOp){.op = COMM_BARRIER};
    engine_submit(comm, h, o);
}

// The sum of one double per rank, in place: MPI's own (the node path sums floats).
static void mpi_start_sum_double(Comm *comm, CommHandle *h, double *value) {
    engine_submit(comm, h, (EngineOp){.op = COMM_ALL_REDUCE, .type = MPI_DOUBLE, .sum = MPI_SUM,
                                      .send = MPI_IN_PLACE, .recv = value, .count = 1});
}

// Finishes a collective the engine carries: the wait, the average, the copy back
// to the device (staged).
static double mpi_wait(Comm *comm, CommHandle *h, double *done, void **event, int *keep) {
    double waited = timer_now();
    EngineOp *o = h->request;
    engine_wait(comm, o);
    if (o->node) comm_count_moved(comm, h->op, o->moved);
    // MPI has no average: sum, then divide by the number of ranks.
    float scale = 1.0f / (float)comm->world;
    if (h->result_count > 0) host_scale(h->result, h->result_count, h->dtype, scale);
    unstage(h);
    *done = o->done, *event = NULL, *keep = 1;
    free(o);
    return timer_now() - waited;
}

// Without the engine's thread MPI moves a collective only inside MPI calls: a test is one.
static void mpi_progress(Comm *comm, CommHandle *h) {
    if (comm->engine_thread) return;
    EngineOp *o = h->request;
    if (o->complete) return;
    int done;
    MPI_CHECK(MPI_Test(&o->request, &done, MPI_STATUS_IGNORE));
    if (done) {
        o->done = timer_now();
        o->complete = 1;
    }
}

static int mpi_test(Comm *comm, CommHandle *h) {
    EngineOp *o = h->request;
    if (!comm->engine_thread) {
        mpi_progress(comm, h);
        return o->complete;
    }
    CommEngine *e = comm->engine;
    PTHREAD_CHECK(pthread_mutex_lock(&e->lock));
    int complete = o->complete;
    PTHREAD_CHECK(pthread_mutex_unlock(&e->lock));
    return complete;
}

MPI_Comm comm_mpi_group(const Comm *comm) { return comm->engine->group; }

// The group's communicator (MPI_Comm_split of the parent's: ranks first + stride
// k share the color `first`) and an engine of its own.
void comm_mpi_split(Comm *parent, Comm *group, int first, int stride) {
    (void)stride;
    MPI_Comm split;
    MPI_CHECK(MPI_Comm_split(parent->engine->group, first, parent->rank, &split));
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
}

// A group's engine and communicator; the world's engine, and MPI itself if
// comm_init started it.
void comm_mpi_free(Comm *comm) {
    MPI_Comm group = comm->engine->group;
    engine_stop(comm);
    if (comm->parent) MPI_CHECK(MPI_Comm_free(&group));
    if (comm->started_mpi) {
        fatal_once_uninstall();
        MPI_CHECK(MPI_Finalize());
        comm->started_mpi = 0;
    }
}

// ---- the uncounted host helpers, on the group's own communicator ----

static void mpi_agree_min_max(Comm *comm, const long long *mine, long long *lo, long long *hi, int n) {
    MPI_CHECK(MPI_Allreduce(mine, lo, n, MPI_LONG_LONG, MPI_MIN, comm_mpi_group(comm)));
    MPI_CHECK(MPI_Allreduce(mine, hi, n, MPI_LONG_LONG, MPI_MAX, comm_mpi_group(comm)));
}

static void mpi_all_gather_double(Comm *comm, double value, double *values) {
    MPI_CHECK(MPI_Allgather(&value, 1, MPI_DOUBLE, values, 1, MPI_DOUBLE, comm_mpi_group(comm)));
}

static double mpi_max_double(Comm *comm, double value) {
    double max;
    MPI_CHECK(MPI_Allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, comm_mpi_group(comm)));
    return max;
}

static void *mpi_gather_bytes(Comm *comm, const void *bytes, size_t count, size_t **counts) {
    int mine = (int)count;
    int *sizes = comm->rank == 0 ? xcalloc((size_t)comm->world, sizeof(int)) : NULL;
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, sizes, 1, MPI_INT, 0, comm_mpi_group(comm)));
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
    MPI_CHECK(MPI_Gatherv(bytes, mine, MPI_BYTE, all, sizes, displs, MPI_BYTE, 0, comm_mpi_group(comm)));
    free(sizes);
    free(displs);
    return all;
}

void comm_use_device_buffers(Comm *comm, int gpus_on_node) {
    if (comm->local_size > gpus_on_node) {
        comm->staged = 1;
        if (comm->rank == 0)
            printf("comm: %d ranks share %d GPU(s) on a node: collectives run on MPI, staged through pinned "
                   "host memory (NCCL needs a GPU per rank)\n", comm->local_size, gpus_on_node);
        return;
    }
    comm_nccl_init(comm);
    comm->backend = &comm_nccl_backend;
    if (comm->rank == 0) printf("comm: NCCL, one GPU per rank\n");
}

const CommBackend comm_mpi_backend = {
    .name = "mpi", .start = mpi_start, .start_sum_double = mpi_start_sum_double, .wait = mpi_wait,
    .test = mpi_test, .element_bytes = mpi_element_bytes, .progress = mpi_progress, .split = comm_mpi_split,
    .free = comm_mpi_free,
    .host = &comm_mpi_backend,
    .agree_min_max = mpi_agree_min_max, .all_gather_double = mpi_all_gather_double, .max_double = mpi_max_double,
    .gather_bytes = mpi_gather_bytes,
};
