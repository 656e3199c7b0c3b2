// comm_nccl.h: the NCCL engine behind comm.h, for device buffers. In a build
// without CUDA these functions exit with a clear message (comm_nccl_stub.c).
#ifndef SHARDLAB_COMM_NCCL_H
#define SHARDLAB_COMM_NCCL_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// Picks the GPU by local rank, shares ncclGetUniqueId from rank 0 over MPI, and
// creates the communicator and its own CUDA stream.
void comm_nccl_init(Comm *comm);
void comm_nccl_free(Comm *comm);
// Enqueues the collective on the communication stream after the compute stream's
// work so far, and records an event; comm_nccl_wait makes the compute stream wait
// on that event (no host synchronisation).
CommHandle comm_nccl_start(Comm *comm, CommHandle handle, const float *send, float *recv,
                           size_t count, int root);
void comm_nccl_wait(Comm *comm, CommHandle *handle);

#ifdef __cplusplus
}
#endif

#endif
