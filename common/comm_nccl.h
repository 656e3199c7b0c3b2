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
// group's NCCL communicator: ncclCommSplit of the parent's, with its own stream.
void comm_nccl_split(Comm *parent, Comm *group, int color, int key);
// Enqueues the collective on the communication stream after the compute stream's
// work so far, and records its completion event (handle.request); comm_nccl_wait
// makes the compute stream wait on that event (no host synchronisation) and
// leaves the event to comm.c, which keeps it for a record or frees it.
CommHandle comm_nccl_start(Comm *comm, CommHandle handle, const void *send, void *recv,
                           size_t count, int root);
void comm_nccl_wait(Comm *comm, CommHandle *handle);
// 1 when the completion event has happened (never blocks).
int comm_nccl_test(void *event);
void comm_nccl_event_free(void *event);
// For each non-NULL events[i]: waits for it, sets records[i].done to the time it
// happened on the host's clock (timer_now), frees it and sets events[i] to NULL.
void comm_nccl_event_times(Comm *comm, void **events, CommRecord *records, size_t n);

#ifdef __cplusplus
}
#endif

#endif
