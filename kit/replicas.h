// replicas.h: the small tensors FSDP keeps whole (--shard-min-numel M).
//
// Slicing a layernorm's C numbers over N ranks saves each rank (N-1)/N of C
// floats and costs a place in every all-gather and reduce-scatter, padded up to
// N rows. With --shard-min-numel M, the tensors of fewer than M elements are kept
// whole on every rank instead, as DDP keeps everything: never gathered
// (TENSOR_REPLICATED), their gradients averaged over all N ranks by one
// all-reduce per unit beside the unit's reduce-scatter, if it has one (the head,
// its layernorm whole, has none: wte is reduced with unit 0), and their AdamW state
// REPLICATED, not owned: every rank then steps them alike, where an owner would
// have to send its update to the others, one more collective per step to save
// a few kilobytes.
//
//   unit u's gradients:  big tensors --reduce-scatter(avg)--> my slices
//                        small ones  --all-reduce(avg)-----> everyone, whole
#ifndef SHARDLAB_REPLICAS_H
#define SHARDLAB_REPLICAS_H

#include "kit/resident.h"
#include "kit/strategy.h"

typedef struct {
    GPT2 *model;
    Comm *comm;            // all N ranks (with --shard-group: across the groups too)
    MemAccount *mem;
    Resident resident;     // the whole tensors (no elements of the sliced ones), unit by unit: their
                           // gradients are averaged by the wire beside each unit's reduce-scatter
} Replicas;

// Marks the tensors of fewer than min_numel elements TENSOR_REPLICATED in
// states[], keeps them whole, made from ctx->source, and points model->params[t]
// and model->grads[t] at them for good (min_numel 0: none).
void replicas_init(Replicas *r, const StrategyContext *ctx, uint64_t min_numel, TensorState *states);
// The whole tensors join `part`'s AdamW steps, EMA swaps and gradient spans (resident_add_whole;
// world rank 0's gradients are the norm's share), alike on every rank.
void replicas_join(Replicas *r, Resident *part);
// Fills *rows with every row of tensor t (world rank 0 writes them) and returns
// 1 if t is kept whole; else 0.
int replicas_rows(Replicas *r, int t, LocalRows *rows);
void replicas_free(Replicas *r);

#endif
