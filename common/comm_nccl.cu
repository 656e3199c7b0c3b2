// comm_nccl.cu: the NCCL engine behind comm.h, for device buffers, one GPU per
// rank. Rank 0 makes the NCCL id and MPI carries it to everyone. Collectives run
// on a communication stream of their own:
//
//   compute stream:  ...backward u3 ─┐record       wait┐─ optimizer ...
//   comm stream:                     └─ NCCL all-reduce ┘
//
// A collective starts after everything the compute stream queued so far (an
// event), and comm_wait makes the compute stream wait for its end (another
// event): no host synchronisation, so communication overlaps the compute queued
// in between.
#include <mpi.h>
#include <nccl.h>

#include "comm_nccl.h"
#include "cuda_check.h"

#define NCCL_CHECK(call)                                                                         \
    do {                                                                                         \
        ncclResult_t nccl_status_ = (call);                                                      \
        if (nccl_status_ != ncclSuccess)                                                         \
            fatal_at(__FILE__, __LINE__, "NCCL error in %s: %s", #call, ncclGetErrorString(nccl_status_)); \
    } while (0)

struct CommNccl {
    ncclComm_t comm;
    cudaStream_t stream;  // the communication stream
};

extern "C" void comm_nccl_init(Comm *comm) {
    ncclUniqueId id;
    if (comm->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
        fatal_at(__FILE__, __LINE__, "MPI_Bcast of the NCCL id failed");
    CommNccl *nccl = (CommNccl *)xcalloc(1, sizeof(CommNccl));
    NCCL_CHECK(ncclCommInitRank(&nccl->comm, comm->world, id, comm->rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&nccl->stream, cudaStreamNonBlocking));
    comm->nccl = nccl;
}

extern "C" void comm_nccl_free(Comm *comm) {
    if (!comm->nccl) return;
    CUDA_CHECK(cudaStreamSynchronize(comm->nccl->stream));
    NCCL_CHECK(ncclCommDestroy(comm->nccl->comm));
    CUDA_CHECK(cudaStreamDestroy(comm->nccl->stream));
    free(comm->nccl);
    comm->nccl = NULL;
}

extern "C" CommHandle comm_nccl_start(Comm *comm, CommHandle h, const float *send, float *recv, size_t count,
                                      int root) {
    CommNccl *nccl = comm->nccl;
    size_t part = count / (size_t)comm->world;
    ncclRedOp_t op = h.reduce_op == COMM_AVG ? ncclAvg : ncclSum;
    h.result_count = 0;  // NCCL averages itself
    cudaEvent_t ready, done;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, 0));  // the compute stream's work so far
    CUDA_CHECK(cudaStreamWaitEvent(nccl->stream, ready, 0));
    switch (h.op) {
    case COMM_ALL_REDUCE:
        NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat, op, nccl->comm, nccl->stream));
        break;
    case COMM_REDUCE_SCATTER:
        NCCL_CHECK(ncclReduceScatter(send, recv, part, ncclFloat, op, nccl->comm, nccl->stream));
        break;
    case COMM_ALL_GATHER:
        NCCL_CHECK(ncclAllGather(send, recv, part, ncclFloat, nccl->comm, nccl->stream));
        break;
    case COMM_BROADCAST:
        NCCL_CHECK(ncclBroadcast(send, recv, count, ncclFloat, root, nccl->comm, nccl->stream));
        break;
    case COMM_REDUCE:  // recv matters only at the root
        NCCL_CHECK(ncclReduce(send, recv, count, ncclFloat, op, root, nccl->comm, nccl->stream));
        break;
    default:
        fatal("comm_nccl_start: %s has no NCCL form", comm_op_names[h.op]);
    }
    CUDA_CHECK(cudaEventRecord(done, nccl->stream));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once the queued wait no longer needs it
    h.request = done;
    return h;
}

extern "C" void comm_nccl_wait(Comm *comm, CommHandle *h) {
    (void)comm;
    cudaEvent_t done = (cudaEvent_t)h->request;
    CUDA_CHECK(cudaStreamWaitEvent(0, done, 0));  // the compute stream waits, the host does not
    CUDA_CHECK(cudaEventDestroy(done));
}
