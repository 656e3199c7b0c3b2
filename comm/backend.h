// backend.h: a backend of the collectives. comm.c, what every backend shares,
// checks a collective's arguments, counts its bytes, makes its handle and keeps
// its record; the group's backend, one file each and reached only through this
// table, moves the bytes:
//
//   mpi.c    host buffers: MPI, on a thread of the group's own (and node.c's
//            reductions through the node's shared memory)
//   nccl.cu  device buffers, one GPU per rank (nccl_stub.c in the CPU build);
//            its host collectives (barrier, metrics) ride on mpi.c's
//   sim.c    the planner's simulated network: nothing moves, time passes on
//            the virtual clock (sim_clock.h)
//
//   comm_all_gather_start: check, count, handle -> comm->backend->start
//   comm_wait:             comm->backend->wait  -> record, count the wait
#ifndef SHARDLAB_COMM_BACKEND_H
#define SHARDLAB_COMM_BACKEND_H

#include <stdint.h>

#include "comm/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

// The bytes one node reduction (comm/node.h) moved between this rank and the others:
// read from their segments (in), read by them from this rank's (out).
typedef struct {
    uint64_t in, out;
} NodeMoved;

struct CommBackend {
    const char *name;  // "mpi", "nccl", "sim"
    // Starts h's collective (h->op on h->dtype, root for broadcast and reduce)
    // on `count` elements, the whole buffer as the call gives it, from send into
    // recv (the same buffer for the in-place all-reduce and broadcast).
    void (*start)(Comm *comm, CommHandle *h, const void *send, void *recv, size_t count, int root);
    // Finishes it: its result (averaged, for COMM_AVG) is where the call asked,
    // or, on a GPU, the compute stream waits for it. Returns what the wait took
    // (seconds of the host's clock, or the virtual one) and, for the trace, when
    // it completed (*done: 0 if not known yet) and an event to time it by
    // (*event: NULL but on NCCL); keep: 0 if no record is kept (simulated).
    double (*wait)(Comm *comm, CommHandle *h, double *done, void **event, int *keep);
    // 1 if it is complete.
    int (*test)(Comm *comm, CommHandle *h);
    // The bytes of one element of `dtype` as it carries it (the counters count
    // these: an element widened on the wire shows); NULL: the dtype's own.
    size_t (*element_bytes)(const Comm *comm, DType dtype);
    // Lets it advance without waiting (comm_progress); NULL: nothing to nudge.
    void (*progress)(Comm *comm, CommHandle *h);
    // A group's own state (comm_split has set its rank and size from `parent`:
    // ranks first + stride k), and its release (comm_free_group, comm_finalize).
    void (*split)(Comm *parent, Comm *group, int first, int stride);
    void (*free)(Comm *comm);
    // For the trace: the times of the completion events its waits gave (NULL:
    // none), and an event's release.
    void (*event_times)(Comm *comm, void **events, CommRecord *records, size_t n);
    void (*event_free)(void *event);
    // Starts the sum of one double per rank, in place in *value (comm_all_reduce_double).
    void (*start_sum_double)(Comm *comm, CommHandle *h, double *value);
    // What carries its host collectives (barrier, the sum of doubles, the helpers below):
    // itself, or, under NCCL, the MPI engine.
    const CommBackend *host;
    // The host helpers, uncounted (metrics, the debug checks of arguments); NULL on the
    // simulated network, whose ranks are alike: each rank's n numbers' minimum and maximum over
    // the group; every rank's double, in rank order; the largest; and rank 0 gathering every
    // rank's bytes (*counts: each rank's count, on rank 0).
    void (*agree_min_max)(Comm *comm, const long long *mine, long long *lo, long long *hi, int n);
    void (*all_gather_double)(Comm *comm, double value, double *values);
    double (*max_double)(Comm *comm, double value);
    void *(*gather_bytes)(Comm *comm, const void *bytes, size_t count, size_t **counts);
};

extern const CommBackend comm_mpi_backend, comm_nccl_backend, comm_sim_backend;

// What comm.c gives the backends: a node reduction's bytes that crossed, into
// the counters of the group and those above it.
void comm_count_moved(Comm *comm, CommOp op, NodeMoved moved);

// What mpi.c gives nccl.cu, which keeps mpi.c's engine under it for the host collectives:
// a group's MPI communicator and engine (comm_split), and their release (comm/mpi_backend.h
// has the MPI communicator itself).
void comm_mpi_split(Comm *parent, Comm *group, int first, int stride);
void comm_mpi_free(Comm *comm);
// What nccl.cu gives comm_use_device_buffers (mpi.c): the world's NCCL communicator.
void comm_nccl_init(Comm *comm);

#ifdef __cplusplus
}
#endif

#endif
