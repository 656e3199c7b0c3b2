// comm/node.c: reductions among the ranks of one machine, at memory speed.
//
// The ranks of a group share a window of N segments (MPI_Win_allocate_shared),
// one per rank, each SEGMENT_BYTES. A reduction goes through it a chunk at a
// time, and no byte crosses a network stack:
//
//   copy in:  rank r copies its chunk into segment r
//   (barrier)
//   sum:      rank r adds piece r of the chunk over segments 0, 1, ..., N-1, in
//             that order, and keeps the sum (reduce-scatter: in its output;
//             all-reduce, reduce: in piece r of its own segment)
//   (barrier)
//   copy out: all-reduce: every rank copies every piece's sum out; reduce: the root does
//   (barrier: the segments may be written again)
//
// Each rank reads N pieces and writes one in the sum, as the ring algorithm's
// ranks do, but with memcpy and a vectorised add instead of MPI's messages and
// its generic reduction path. What crosses between ranks is what one reads from
// another's segment, counted as it happens (NodeMoved): for all-reduce and
// reduce-scatter at N = 2 it is the ring model's bytes, elsewhere it differs
// (a reduce's root reads every sum; no chain). The order of the additions is fixed, so the result
// is the same bits whatever MPI's algorithms or the timing: MPI's own order
// depends on the algorithm it picks for the size.
#include "comm/node.h"

#include <stdlib.h>
#include <string.h>

#include "device/dtype.h"
#include "comm/mpi_check.h"
#include "util/errors.h"

#define SEGMENT_BYTES ((size_t)4 << 20)  // each rank's share of the window: one chunk's copy-in
#define BLOCK 1024                       // elements summed at a time, in a buffer on the stack

struct NodeArena {
    MPI_Comm comm;      // the group's ranks, for the barriers
    MPI_Win window;
    int rank, world;
    char **segments;    // (world) each rank's segment, as this process sees it
};


NodeArena *node_arena_create(MPI_Comm comm) {
    int world, on_node;
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_size(comm, &world));
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_size(node, &on_node));
    MPI_CHECK(MPI_Comm_free(&node));
    if (world < 2 || on_node != world) return NULL;  // the same answer on every rank of the group
    NodeArena *a = xcalloc(1, sizeof *a);
    MPI_CHECK(MPI_Comm_dup(comm, &a->comm));
    MPI_CHECK(MPI_Comm_rank(a->comm, &a->rank));
    a->world = world;
    char *mine;
    MPI_CHECK(MPI_Win_allocate_shared((MPI_Aint)SEGMENT_BYTES, 1, MPI_INFO_NULL, a->comm, &mine, &a->window));
    a->segments = xcalloc((size_t)world, sizeof *a->segments);
    for (int q = 0; q < world; q++) {
        MPI_Aint size;
        int unit;
        MPI_CHECK(MPI_Win_shared_query(a->window, q, &size, &unit, &a->segments[q]));
    }
    // one passive epoch for the window's life: loads and stores, ordered by MPI_Win_sync
    MPI_CHECK(MPI_Win_lock_all(MPI_MODE_NOCHECK, a->window));
    return a;
}

void node_arena_free(NodeArena *a) {
    if (!a) return;
    MPI_CHECK(MPI_Win_unlock_all(a->window));
    MPI_CHECK(MPI_Win_free(&a->window));
    MPI_CHECK(MPI_Comm_free(&a->comm));
    free(a->segments);
    free(a);
}

// Every rank's stores to the window before it are seen by every rank's loads after it.
static void barrier(NodeArena *a, NodeWait wait, void *context) {
    MPI_Request request;
    MPI_CHECK(MPI_Win_sync(a->window));
    MPI_CHECK(MPI_Ibarrier(a->comm, &request));
    wait(context, &request);
    MPI_CHECK(MPI_Win_sync(a->window));
}

// dst[i] = src[0][i] + src[1][i] + ... + src[world-1][i], added in that order
// (bf16: each partial sum rounded to bf16, as bf16_add does).
static void sum_in_rank_order(void *dst, char *const *src, size_t at, size_t n, int world, DType dtype) {
    size_t size = dtype_size(dtype);
    for (size_t b = 0; b < n; b += BLOCK) {
        size_t m = n - b < BLOCK ? n - b : BLOCK;
        if (dtype == DTYPE_FP32) {
            float acc[BLOCK];
            memcpy(acc, src[0] + (at + b) * size, m * size);
            for (int q = 1; q < world; q++) {
                const float *x = (const float *)(src[q] + (at + b) * size);
                for (size_t i = 0; i < m; i++) acc[i] += x[i];
            }
            memcpy((char *)dst + b * size, acc, m * size);
        } else {
            bf16 acc[BLOCK];
            memcpy(acc, src[0] + (at + b) * size, m * size);
            for (int q = 1; q < world; q++) {
                const bf16 *x = (const bf16 *)(src[q] + (at + b) * size);
                for (size_t i = 0; i < m; i++) acc[i] = bf16_add(acc[i], x[i]);
            }
            memcpy((char *)dst + b * size, acc, m * size);
        }
    }
}

// Reduce-scatter: rank r's output is block r of every rank's input, summed.
// Each chunk holds the same stretch of all N blocks.
static void reduce_scatter(NodeArena *a, const char *in, char *out, size_t count, DType dtype, NodeMoved *moved,
                           NodeWait wait, void *context) {
    size_t size = dtype_size(dtype), chunk = SEGMENT_BYTES / size / (size_t)a->world, others = (size_t)a->world - 1;
    char *mine = a->segments[a->rank];
    for (size_t c0 = 0; c0 < count; c0 += chunk) {
        size_t n = count - c0 < chunk ? count - c0 : chunk;
        for (int q = 0; q < a->world; q++) memcpy(mine + (size_t)q * n * size, in + ((size_t)q * count + c0) * size, n * size);
        barrier(a, wait, context);
        sum_in_rank_order(out + c0 * size, a->segments, (size_t)a->rank * n, n, a->world, dtype);
        moved->in += others * n * size;   // block r of every other segment
        moved->out += others * n * size;  // block q of mine, read by rank q
        barrier(a, wait, context);
    }
}

// All-reduce (every rank copies out) and reduce (the root alone does): piece q
// of each chunk is summed by rank q into its own segment, then read from there.
static void reduce_to(NodeArena *a, const char *in, char *out, size_t count, DType dtype, int everyone, int root,
                      NodeMoved *moved, NodeWait wait, void *context) {
    size_t size = dtype_size(dtype), chunk = SEGMENT_BYTES / size, N = (size_t)a->world;
    char *mine = a->segments[a->rank];
    char piece[BLOCK * sizeof(float)];
    for (size_t c0 = 0; c0 < count; c0 += chunk) {
        size_t n = count - c0 < chunk ? count - c0 : chunk;
        size_t lo = (size_t)a->rank * n / N, hi = ((size_t)a->rank + 1) * n / N;
        memcpy(mine, in + c0 * size, n * size);
        barrier(a, wait, context);
        // summed a block at a time into a buffer, then stored: segment r's piece r is one of the addends
        for (size_t b = lo; b < hi; b += BLOCK) {
            size_t m = hi - b < BLOCK ? hi - b : BLOCK;
            sum_in_rank_order(piece, a->segments, b, m, a->world, dtype);
            memcpy(mine + b * size, piece, m * size);
        }
        moved->in += (N - 1) * (hi - lo) * size;  // piece r of every other segment
        moved->out += (n - (hi - lo)) * size;     // piece q of mine, read by rank q
        barrier(a, wait, context);
        if (everyone || a->rank == root) {
            for (size_t q = 0; q < N; q++) {
                size_t qlo = q * n / N, qhi = (q + 1) * n / N;
                memcpy(out + (c0 + qlo) * size, a->segments[q] + qlo * size, (qhi - qlo) * size);
            }
            moved->in += (n - (hi - lo)) * size;  // the other ranks' sums
        }
        if (everyone) moved->out += (N - 1) * (hi - lo) * size;  // my sum, read by every other rank
        else if (a->rank != root) moved->out += (hi - lo) * size;  // by the root
        barrier(a, wait, context);
    }
}

void node_reduce(NodeArena *a, CommOp op, const void *in, void *out, size_t count, DType dtype, int root,
                 NodeMoved *moved, NodeWait wait, void *context) {
    *moved = (NodeMoved){0, 0};
    switch (op) {
    case COMM_REDUCE_SCATTER: reduce_scatter(a, in, out, count, dtype, moved, wait, context); break;
    case COMM_ALL_REDUCE: reduce_to(a, in, out, count, dtype, 1, root, moved, wait, context); break;
    case COMM_REDUCE: reduce_to(a, in, out, count, dtype, 0, root, moved, wait, context); break;
    default: fatal("node_reduce: %s is not a reduction", comm_op_names[op]);
    }
}
