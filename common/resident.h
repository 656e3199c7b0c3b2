// resident.h: what a rank keeps between steps: its part of every tensor's
// parameters, gradients and AdamW moments, packed unit by unit in one flat
// layout. The strategies differ only in how much of each tensor that part is:
// all of it (DDP), all or nothing (ZeRO-3), a dim-0 slice (FSDP).
//
// In a --precision bf16 run the part also has an fp32 master copy of its
// parameters: AdamW updates the master and rounds it into the bf16 working
// copy (`params`), which is what the model reads and the collectives move.
//
//   bytes per element kept:  params  grads  master  m  v
//   fp32                        4      4      -     4  4   = 16
//   bf16 (--reduce-dtype bf16)  2      2      4     4  4   = 16
//   bf16, --reduce-dtype fp32   2      4      4     4  4   = 18
#ifndef SHARDLAB_RESIDENT_H
#define SHARDLAB_RESIDENT_H

#include "partition.h"
#include "strategy.h"

typedef struct {
    FlatLayout flat;
    DType param_dtype, grad_dtype;
    void *params;      // (flat.total) param_dtype, in device memory
    void *grads;       // (flat.total) grad_dtype
    float *master;     // (flat.total) fp32 copy of params when those are bf16, else NULL
    float *m, *v;      // (flat.total) each
    AdamWSpan *spans;  // (num_tensors) empty where the rank keeps nothing
} Resident;

// count[t]: the elements of tensor t this rank keeps; the dtypes are the model's.
void resident_init(Resident *r, const GPT2 *model, const size_t *count, MemAccount *mem);
// Fills tensor t's part with rows [row_begin, row_begin + row_count) from the source.
void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count);
// Makes every rank's parts root's: one broadcast of the fp32 values (the master
// in a bf16 run, which every rank then rounds into its working copy).
void resident_broadcast(Resident *r, Comm *comm, int root);
// Where tensor t's part starts in params and in grads.
void *resident_params(const Resident *r, int t);
void *resident_grads(const Resident *r, int t);
// AdamW on every part this rank keeps, then zeroes the gradients for the next step.
void resident_step(Resident *r, int num_tensors, AdamWConfig config);
// Tensor t's part as rows [row_begin, row_begin + row_count), for checkpoints.
LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes);
void resident_free(Resident *r, MemAccount *mem);

#endif
