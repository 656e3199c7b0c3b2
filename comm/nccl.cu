// comm/nccl.cu: the NCCL engine behind comm.h, for device buffers, one GPU per
// rank. Rank 0 makes the NCCL id and MPI carries it to everyone. Collectives run
// on a communication stream of their own:
//
//   compute stream:  ...backward u3 ─┐record       wait┐─ optimizer ...
//   comm stream:                     └─ NCCL all-reduce ┘
//
// A collective starts after everything the compute stream queued so far (an
// event), and comm_wait makes the compute stream wait for its end (another
// event): no host synchronisation, so communication overlaps the compute queued
// in between. The end event is timed, so that the trace shows when the GPU
// finished the collective, not when the host queued it.
#include <mpi.h>
#include <nccl.h>

#include "comm/backend.h"
#include "device/cuda_check.h"
#include "util/timer.h"

#define NCCL_CHECK(call)                                                                         \
    do {                                                                                         \
        ncclResult_t nccl_status_ = (call);                                                      \
        if (nccl_status_ != ncclSuccess)                                                         \
            fatal_at(__FILE__, __LINE__, "NCCL error in %s: %s", #call, ncclGetErrorString(nccl_status_)); \
    } while (0)

struct CommNccl {
    ncclComm_t comm;
    cudaStream_t stream;  // the communication stream
    cudaStream_t clock;   // always idle: an event recorded there happens at once
};

extern "C" void comm_nccl_init(Comm *comm) {
    ncclUniqueId id;
    if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        fatal_at(__FILE__, __LINE__, "MPI_Bcast of the NCCL id failed");
    CommNccl *nccl = (CommNccl *)xcalloc(1, sizeof(CommNccl));
    NCCL_CHECK(ncclCommInitRank(&nccl->comm, comm->world, id, comm->rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl->clock, cudaStreamNonBlocking));
    comm->nccl = nccl;
}

// A group: its MPI engine (for the host collectives) and its NCCL communicator,
// split from the parent's (color: the group's first rank).
static void nccl_split(Comm *parent, Comm *group, int first, int stride) {
    comm_mpi_split(parent, group, first, stride);
    CommNccl *nccl = (CommNccl *)xcalloc(1, sizeof(CommNccl));
    NCCL_CHECK(ncclCommSplit(parent->nccl->comm, first, parent->rank, &nccl->comm, NULL));
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl->clock, cudaStreamNonBlocking));
    group->nccl = nccl;
}

static void nccl_free(Comm *comm) {
    if (comm->nccl) {
        CUDA_CHECK(cudaStreamSynchronize(comm->nccl->stream));
        NCCL_CHECK(ncclCommDestroy(comm->nccl->comm));
        CUDA_CHECK(cudaStreamDestroy(comm->nccl->stream));
        CUDA_CHECK(cudaStreamDestroy(comm->nccl->clock));
        free(comm->nccl);
        comm->nccl = NULL;
    }
    comm_mpi_free(comm);
}

static void nccl_start(Comm *comm, CommHandle *handle, const void *send, void *recv, size_t count, int root) {
    CommHandle &h = *handle;
    CommNccl *nccl = comm->nccl;
    size_t part = count / (size_t)comm->world;
    ncclRedOp_t op = h.reduce_op == COMM_AVG ? ncclAvg : ncclSum;
    ncclDataType_t type = h.dtype == DTYPE_BF16 ? ncclBfloat16 : h.dtype == DTYPE_INT8 ? ncclInt8 : ncclFloat;
    h.result_count = 0;  // NCCL averages itself
    cudaEvent_t ready, done;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreate(&done));  // timed: nccl_event_times reads it
    CUDA_CHECK(cudaEventRecord(ready, 0));  // the compute stream's work so far
    CUDA_CHECK(cudaStreamWaitEvent(nccl->stream, ready, 0));
    switch (h.op) {
    case COMM_ALL_REDUCE:
        NCCL_CHECK(ncclAllReduce(send, recv, count, type, op, nccl->comm, nccl->stream));
        break;
    case COMM_REDUCE_SCATTER:
        NCCL_CHECK(ncclReduceScatter(send, recv, part, type, op, nccl->comm, nccl->stream));
        break;
    case COMM_ALL_GATHER:
        NCCL_CHECK(ncclAllGather(send, recv, part, type, nccl->comm, nccl->stream));
        break;
    case COMM_BROADCAST:
        NCCL_CHECK(ncclBroadcast(send, recv, count, type, root, nccl->comm, nccl->stream));
        break;
    case COMM_REDUCE:  // recv matters only at the root
        NCCL_CHECK(ncclReduce(send, recv, count, type, op, root, nccl->comm, nccl->stream));
        break;
    case COMM_ALL_TO_ALL: {  // NCCL has no all-to-all of its own: a send and a receive with every peer, grouped
        size_t block = part * dtype_size(h.dtype);
        NCCL_CHECK(ncclGroupStart());
        for (int peer = 0; peer < comm->world; peer++) {
            NCCL_CHECK(ncclSend((const char *)send + peer * block, part, type, peer, nccl->comm, nccl->stream));
            NCCL_CHECK(ncclRecv((char *)recv + peer * block, part, type, peer, nccl->comm, nccl->stream));
        }
        NCCL_CHECK(ncclGroupEnd());
        break;
    }
    case COMM_GATHER: {  // nor a gather: every rank sends its part to the root, which receives them all
        size_t block = part * dtype_size(h.dtype);
        NCCL_CHECK(ncclGroupStart());
        NCCL_CHECK(ncclSend(send, part, type, root, nccl->comm, nccl->stream));
        for (int peer = 0; comm->rank == root && peer < comm->world; peer++)
            NCCL_CHECK(ncclRecv((char *)recv + peer * block, part, type, peer, nccl->comm, nccl->stream));
        NCCL_CHECK(ncclGroupEnd());
        break;
    }
    default:
        fatal("nccl_start: %s has no NCCL form", comm_op_names[h.op]);
    }
    CUDA_CHECK(cudaEventRecord(done, nccl->stream));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once the queued wait no longer needs it
    h.request = done;
}

// The compute stream waits for the collective's end event; the host does not.
// The event times it for the trace (nccl_event_times).
static double nccl_wait(Comm *comm, CommHandle *h, double *done, void **event, int *keep) {
    (void)comm;
    double waited = timer_now();
    CUDA_CHECK(cudaStreamWaitEvent(0, (cudaEvent_t)h->request, 0));
    *done = 0.0, *event = h->request, *keep = 1;
    return timer_now() - waited;
}

static int nccl_test(Comm *comm, CommHandle *h) {
    (void)comm;
    cudaError_t status = cudaEventQuery((cudaEvent_t)h->request);
    if (status == cudaErrorNotReady) return 0;
    CUDA_CHECK(status);
    return 1;
}

// Released once the queued waits no longer need it.
static void nccl_event_free(void *event) { CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event)); }

// The GPU's clock and the host's meet once: an event on the idle clock stream
// happens as soon as it is recorded, and the host reads its clock right after
// it; every completion event is placed relative to that one.
static void nccl_event_times(Comm *comm, void **events, CommRecord *records, size_t n) {
    cudaEvent_t now;
    CUDA_CHECK(cudaEventCreate(&now));
    for (size_t i = 0; i < n; i++)
        if (events[i]) CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)events[i]));
    CUDA_CHECK(cudaEventRecord(now, comm->nccl->clock));
    CUDA_CHECK(cudaEventSynchronize(now));
    double host_now = timer_now();
    for (size_t i = 0; i < n; i++) {
        if (!events[i]) continue;
        float before_ms;  // how long before `now` the collective completed
        CUDA_CHECK(cudaEventElapsedTime(&before_ms, (cudaEvent_t)events[i], now));
        records[i].done = host_now - 1e-3 * before_ms;
        nccl_event_free(events[i]);
        events[i] = NULL;
    }
    CUDA_CHECK(cudaEventDestroy(now));
}

// Its host collectives (barrier, the sum of doubles) run on the MPI engine kept under it.
extern "C" const CommBackend comm_nccl_backend = {
    "nccl", nccl_start, nccl_wait, nccl_test, NULL, NULL, nccl_split, nccl_free, nccl_event_times, nccl_event_free,
    NULL, &comm_mpi_backend,
};
