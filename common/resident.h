// resident.h: what a rank keeps between steps: its part of every tensor's
// parameters, gradients and AdamW moments, packed unit by unit in one flat
// layout. The strategies differ only in how much of each tensor that part is:
// all of it (DDP), all or nothing (ZeRO-3), a dim-0 slice (FSDP).
#ifndef SHARDLAB_RESIDENT_H
#define SHARDLAB_RESIDENT_H

#include "partition.h"
#include "strategy.h"

typedef struct {
    FlatLayout flat;
    float *params, *grads, *m, *v;  // (flat.total) each, in device memory
    AdamWSpan *spans;               // (num_tensors) empty where the rank keeps nothing
} Resident;

// count[t]: the elements of tensor t this rank keeps.
void resident_init(Resident *r, const GPT2Layout *layout, const size_t *count, MemAccount *mem);
// Fills tensor t's part with rows [row_begin, row_begin + row_count) from the source.
void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count);
// AdamW on every part this rank keeps, then zeroes the gradients for the next step.
void resident_step(Resident *r, int num_tensors, AdamWConfig config);
// Tensor t's part as rows [row_begin, row_begin + row_count), for checkpoints.
LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes);
void resident_free(Resident *r, MemAccount *mem);

#endif
