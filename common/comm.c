// comm.c: argument checks, accounting, and the MPI engine for host buffers.
// Device buffers go to comm_nccl.cu (GPU build).
#include "comm.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "comm_nccl.h"
#include "device.h"
#include "util/errors.h"
#include "util/timer.h"

#define MPI_CHECK(call)                                                              \
    do {                                                                             \
        int mpi_status_ = (call);                                                    \
        if (mpi_status_ != MPI_SUCCESS) {                                            \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                     \
            int mpi_len_ = 0;                                                        \
            MPI_Error_string(mpi_status_, mpi_msg_, &mpi_len_);                      \
            fatal_at(__FILE__, __LINE__, "MPI error in %s: %s", #call, mpi_msg_);   \
        }                                                                            \
    } while (0)

const char *const comm_op_names[COMM_NUM_OPS] = {
    "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "barrier",
};

void comm_init(Comm *comm, int *argc, char ***argv) {
    memset(comm, 0, sizeof *comm);
    int initialized;
    MPI_CHECK(MPI_Initialized(&initialized));
    if (!initialized) {
        MPI_CHECK(MPI_Init(argc, argv));
        comm->started_mpi = 1;
    }
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &comm->world));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, comm->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &comm->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &comm->local_size));
    MPI_CHECK(MPI_Comm_free(&node));
    const char *debug = getenv("SHARDLAB_COMM_DEBUG");
    comm->debug_checks = debug && strcmp(debug, "0") != 0;
    comm->backend = COMM_BACKEND_MPI;
}

void comm_finalize(Comm *comm) {
    if (comm->backend == COMM_BACKEND_NCCL) comm_nccl_free(comm);
    if (comm->started_mpi) MPI_CHECK(MPI_Finalize());
    comm->started_mpi = 0;
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
    comm->backend = COMM_BACKEND_NCCL;
    if (comm->rank == 0) printf("comm: NCCL, one GPU per rank\n");
}

// Staged MPI: copy the device input to a pinned host buffer, run MPI there, and
// copy the result back in comm_wait. *send and *recv are redirected to the host
// copies; in-place collectives (send == recv) share one.
static void stage(Comm *comm, CommHandle *h, const float **send, size_t send_count, float **recv,
                  size_t recv_count) {
    if (!comm->staged) return;
    int in_place = *send == *recv;
    h->staged_send = device_host_alloc(send_count);
    if (*send) device_to_host(h->staged_send, *send, send_count);
    h->staged_recv = in_place ? h->staged_send : (*recv ? device_host_alloc(recv_count) : NULL);
    h->device_recv = *recv;
    h->staged_recv_count = *recv ? recv_count : 0;
    if (h->result) h->result = h->staged_recv;
    *send = h->staged_send;
    *recv = h->staged_recv;
}

static void unstage(CommHandle *h) {
    if (!h->staged_send) return;
    if (h->device_recv) device_from_host(h->device_recv, h->staged_recv, h->staged_recv_count);
    if (h->staged_recv != h->staged_send) device_host_free(h->staged_recv);
    device_host_free(h->staged_send);
    h->staged_send = h->staged_recv = h->device_recv = NULL;
}

void comm_ring_bytes(CommOp op, size_t count, int rank, int world, int root, uint64_t *sent,
                     uint64_t *recv) {
    uint64_t S = (uint64_t)count * sizeof(float), N = (uint64_t)world;
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

static void count_call(Comm *comm, CommOp op, size_t count, int root) {
    uint64_t sent, recv;
    comm_ring_bytes(op, count, comm->rank, comm->world, root, &sent, &recv);
    CommCounter *c = &comm->stats.ops[op];
    c->calls++;
    c->elements += count;
    c->bytes_sent += sent;
    c->bytes_recv += recv;
}

// Debug mode: every rank compares its arguments with everyone else's before the
// collective starts, so a mismatch becomes the same clear error on all ranks
// instead of a hang or a silent corruption.
static void check_arguments(Comm *comm, CommOp op, size_t count, int root, int buffers_ok) {
    int root_ok = root >= 0 && root < comm->world;
    int divisible = !((op == COMM_REDUCE_SCATTER || op == COMM_ALL_GATHER) && count % (size_t)comm->world);
    if (!comm->debug_checks) {
        // the local checks are free, so they always run; they end only this rank
        if (!buffers_ok) fatal("%s: null buffer on rank %d", comm_op_names[op], comm->rank);
        if (!root_ok) fatal("%s: root %d is not a rank of %d", comm_op_names[op], root, comm->world);
        if (!divisible)
            fatal("%s: count %zu is not divisible by the %d ranks", comm_op_names[op], count, comm->world);
        return;
    }
    long long mine[5] = {op, (long long)count, root, buffers_ok && root_ok, divisible};
    long long lo[5], hi[5];
    MPI_CHECK(MPI_Allreduce(mine, lo, 5, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD));
    MPI_CHECK(MPI_Allreduce(mine, hi, 5, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD));
    if (lo[0] != hi[0]) fatal("rank %d: ranks called different collectives (%s here)", comm->rank, comm_op_names[op]);
    if (lo[1] != hi[1])
        fatal("rank %d: %s counts differ across ranks (%lld..%lld, %zu here)", comm->rank,
              comm_op_names[op], lo[1], hi[1], count);
    if (lo[2] != hi[2])
        fatal("rank %d: %s roots differ across ranks (%lld..%lld)", comm->rank, comm_op_names[op], lo[2], hi[2]);
    if (!lo[3])
        fatal("rank %d: %s: a null buffer or a root outside 0..%d on some rank (here: buffer %s, root %d)",
              comm->rank, comm_op_names[op], comm->world - 1, buffers_ok ? "ok" : "NULL", root);
    if (!lo[4])
        fatal("rank %d: %s: count %zu is not divisible by the %d ranks", comm->rank,
              comm_op_names[op], count, comm->world);
}

static CommHandle new_handle(CommOp op, CommReduceOp reduce_op, float *result, size_t result_count) {
    CommHandle h = {.active = 1, .op = op, .reduce_op = reduce_op, .result = result,
                    .result_count = reduce_op == COMM_AVG ? result_count : 0};
    return h;
}

static void *new_mpi_request(void) { return xmalloc(sizeof(MPI_Request)); }

// MPI_IN_PLACE where a collective reads and writes the same buffer.
CommHandle comm_all_reduce_start(Comm *comm, float *buf, size_t count, CommReduceOp op) {
    check_arguments(comm, COMM_ALL_REDUCE, count, 0, buf != NULL);
    count_call(comm, COMM_ALL_REDUCE, count, 0);
    CommHandle h = new_handle(COMM_ALL_REDUCE, op, buf, count);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, buf, buf, count, 0);
    const float *in = buf;
    stage(comm, &h, &in, count, &buf, count);
    h.request = new_mpi_request();
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, h.request));
    return h;
}

CommHandle comm_reduce_scatter_start(Comm *comm, const float *send, float *recv, size_t count, CommReduceOp op) {
    check_arguments(comm, COMM_REDUCE_SCATTER, count, 0, send && recv);
    count_call(comm, COMM_REDUCE_SCATTER, count, 0);
    size_t part = count / (size_t)comm->world;
    CommHandle h = new_handle(COMM_REDUCE_SCATTER, op, recv, part);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, 0);
    stage(comm, &h, &send, count, &recv, part);
    h.request = new_mpi_request();
    MPI_CHECK(MPI_Ireduce_scatter_block(send, recv, (int)part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, h.request));
    return h;
}

CommHandle comm_all_gather_start(Comm *comm, const float *send, float *recv, size_t count) {
    check_arguments(comm, COMM_ALL_GATHER, count, 0, send && recv);
    count_call(comm, COMM_ALL_GATHER, count, 0);
    size_t part = count / (size_t)comm->world;
    CommHandle h = new_handle(COMM_ALL_GATHER, COMM_SUM, recv, 0);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, 0);
    stage(comm, &h, &send, part, &recv, count);
    h.request = new_mpi_request();
    MPI_CHECK(MPI_Iallgather(send, (int)part, MPI_FLOAT, recv, (int)part, MPI_FLOAT, MPI_COMM_WORLD, h.request));
    return h;
}

CommHandle comm_broadcast_start(Comm *comm, float *buf, size_t count, int root) {
    check_arguments(comm, COMM_BROADCAST, count, root, buf != NULL);
    count_call(comm, COMM_BROADCAST, count, root);
    CommHandle h = new_handle(COMM_BROADCAST, COMM_SUM, buf, 0);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, buf, buf, count, root);
    const float *in = buf;
    stage(comm, &h, &in, count, &buf, count);
    h.request = new_mpi_request();
    MPI_CHECK(MPI_Ibcast(buf, (int)count, MPI_FLOAT, root, MPI_COMM_WORLD, h.request));
    return h;
}

CommHandle comm_reduce_start(Comm *comm, const float *send, float *recv, size_t count, int root, CommReduceOp op) {
    int is_root = comm->rank == root;
    check_arguments(comm, COMM_REDUCE, count, root, send && (recv || !is_root));
    count_call(comm, COMM_REDUCE, count, root);
    CommHandle h = new_handle(COMM_REDUCE, op, recv, is_root ? count : 0);
    if (comm->backend == COMM_BACKEND_NCCL) return comm_nccl_start(comm, h, send, recv, count, root);
    stage(comm, &h, &send, count, &recv, count);
    h.request = new_mpi_request();
    // the root may reduce in place (send == recv), which MPI spells MPI_IN_PLACE
    const void *source = is_root && send == recv ? MPI_IN_PLACE : send;
    MPI_CHECK(MPI_Ireduce(source, recv, (int)count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD, h.request));
    return h;
}

void comm_wait(Comm *comm, CommHandle *h) {
    if (!h->active) return;
    double start = timer_now();
    if (comm->backend == COMM_BACKEND_NCCL) {
        comm_nccl_wait(comm, h);
    } else {
        MPI_CHECK(MPI_Wait((MPI_Request *)h->request, MPI_STATUS_IGNORE));
        free(h->request);
        // MPI has no average: sum, then divide by the number of ranks.
        float scale = 1.0f / (float)comm->world;
        for (size_t i = 0; i < h->result_count; i++) h->result[i] *= scale;
        unstage(h);
    }
    h->request = NULL;
    h->active = 0;
    comm->stats.ops[h->op].seconds += timer_now() - start;
}

void comm_progress(Comm *comm, CommHandle *h) {
    if (!h->active || comm->backend != COMM_BACKEND_MPI) return;
    int done;  // once done, MPI sets the request to MPI_REQUEST_NULL and comm_wait returns at once
    MPI_CHECK(MPI_Test((MPI_Request *)h->request, &done, MPI_STATUS_IGNORE));
}

void comm_all_reduce(Comm *comm, float *buf, size_t count, CommReduceOp op) {
    CommHandle h = comm_all_reduce_start(comm, buf, count, op);
    comm_wait(comm, &h);
}

void comm_reduce_scatter(Comm *comm, const float *send, float *recv, size_t count, CommReduceOp op) {
    CommHandle h = comm_reduce_scatter_start(comm, send, recv, count, op);
    comm_wait(comm, &h);
}

void comm_all_gather(Comm *comm, const float *send, float *recv, size_t count) {
    CommHandle h = comm_all_gather_start(comm, send, recv, count);
    comm_wait(comm, &h);
}

void comm_broadcast(Comm *comm, float *buf, size_t count, int root) {
    CommHandle h = comm_broadcast_start(comm, buf, count, root);
    comm_wait(comm, &h);
}

void comm_reduce(Comm *comm, const float *send, float *recv, size_t count, int root, CommReduceOp op) {
    CommHandle h = comm_reduce_start(comm, send, recv, count, root, op);
    comm_wait(comm, &h);
}

void comm_barrier(Comm *comm) {
    check_arguments(comm, COMM_BARRIER, 0, 0, 1);
    count_call(comm, COMM_BARRIER, 0, 0);
    double start = timer_now();
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    comm->stats.ops[COMM_BARRIER].seconds += timer_now() - start;
}

double comm_all_reduce_double(Comm *comm, double value) {
    check_arguments(comm, COMM_ALL_REDUCE, 2, 0, 1);
    count_call(comm, COMM_ALL_REDUCE, 2, 0);  // 8 bytes: counted as two floats
    double start = timer_now(), sum;
    MPI_CHECK(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    comm->stats.ops[COMM_ALL_REDUCE].seconds += timer_now() - start;
    return sum;
}

double comm_metric_average(Comm *comm, double value) {
    double sum;
    MPI_CHECK(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return sum / comm->world;
}

double comm_metric_max(Comm *comm, double value) {
    (void)comm;
    double max;
    MPI_CHECK(MPI_Allreduce(&value, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return max;
}

void *comm_metric_gather(Comm *comm, const void *bytes, size_t count, size_t **counts) {
    int mine = (int)count;
    int *sizes = comm->rank == 0 ? xcalloc((size_t)comm->world, sizeof(int)) : NULL;
    MPI_CHECK(MPI_Gather(&mine, 1, MPI_INT, sizes, 1, MPI_INT, 0, MPI_COMM_WORLD));
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
    MPI_CHECK(MPI_Gatherv(bytes, mine, MPI_BYTE, all, sizes, displs, MPI_BYTE, 0, MPI_COMM_WORLD));
    free(sizes);
    free(displs);
    return all;
}

void comm_stats_reset(Comm *comm) { memset(&comm->stats, 0, sizeof comm->stats); }

CommStats comm_stats_diff(const CommStats *after, const CommStats *before) {
    CommStats d;
    for (int i = 0; i < COMM_NUM_OPS; i++) {
        d.ops[i].calls = after->ops[i].calls - before->ops[i].calls;
        d.ops[i].elements = after->ops[i].elements - before->ops[i].elements;
        d.ops[i].bytes_sent = after->ops[i].bytes_sent - before->ops[i].bytes_sent;
        d.ops[i].bytes_recv = after->ops[i].bytes_recv - before->ops[i].bytes_recv;
        d.ops[i].seconds = after->ops[i].seconds - before->ops[i].seconds;
    }
    return d;
}
