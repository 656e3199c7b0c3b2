// comm/node.h: reductions among the ranks of one machine at the speed of its
// memory, through a window of shared memory (comm/node.c). The engine of
// comm/comm.c uses them for every all-reduce, reduce-scatter and reduce when
// every rank of a group is on one node and its thread runs them (not the inline
// engine; not with SHARDLAB_COMM_REDUCE=mpi): they sum in rank order, so a run's
// bits do not depend on MPI's choice of algorithm, and MPI's own reductions run
// far below the speed at which MPI moves the same bytes (docs/communication.md).
#ifndef SHARDLAB_COMM_NODE_H
#define SHARDLAB_COMM_NODE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/backend.h"

typedef struct NodeArena NodeArena;

// Collective over `comm`. NULL when the group's ranks are not all on one node,
// or it has one rank: MPI's own collectives serve it.
NodeArena *node_arena_create(MPI_Comm comm);
void node_arena_free(NodeArena *arena);

// How the caller waits for a barrier's request (the engine tests it between pauses).
typedef void (*NodeWait)(void *context, MPI_Request *request);

// op is COMM_ALL_REDUCE (in: count elements, out: count; in == out for in place),
// COMM_REDUCE_SCATTER (in: world * count, out: this rank's count) or COMM_REDUCE
// (in: count; out, at root only: count). Sums in rank order 0, 1, ..., N-1,
// element by element (bf16: each partial sum rounded, as bf16_add), so the
// result is the same bits whatever the timing. Every rank of the group calls it
// with the same op, count, dtype and root, in the same order as its other node
// reductions. *moved gets the bytes that crossed between ranks.
void node_reduce(NodeArena *arena, CommOp op, const void *in, void *out, size_t count, DType dtype, int root,
                 NodeMoved *moved, NodeWait wait, void *context);

#endif
