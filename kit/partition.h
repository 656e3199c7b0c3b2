// partition.h: how the model's tensors are split across ranks.
//
//   FlatLayout   - packs per-tensor spans (whole tensors, or slices) into one
//                  flat buffer, unit by unit, so a unit's spans are contiguous.
//   ZeRO-3       - each tensor is owned whole by one rank. Largest tensor first,
//                  each onto the rank that holds the fewest bytes so far.
//   FSDP         - each tensor is cut along dim 0 into N equal slices; dim 0 is
//                  padded up to a multiple of N with rows that stay zero.
//   ZeRO-1/2     - all P parameters, concatenated in llm.c's order, are cut into
//                  N equal contiguous ranges of ceil(P/N) elements; the last
//                  range ends in padding past P. A range may cut a tensor, even
//                  a row, anywhere.
#ifndef SHARDLAB_PARTITION_H
#define SHARDLAB_PARTITION_H

#include <stddef.h>

#include "models/gpt2.h"

typedef struct {
    size_t *offset;      // (num_tensors) start of tensor t's span; spans of size 0 allowed
    size_t *count;       // (num_tensors) elements of tensor t's span
    size_t *unit_begin;  // (num_units) first element of the spans whose home unit is u
    size_t *unit_end;    // (num_units)
    size_t total;
} FlatLayout;

// Lays out count[t] elements per tensor, grouped by home unit in unit order.
void flat_layout_init(FlatLayout *flat, const GPT2Layout *layout, const size_t *count);
void flat_layout_free(FlatLayout *flat);

// ZeRO-3: owner[t] for every tensor (owner has num_tensors entries).
void whole_tensor_owners(const GPT2Layout *layout, int world, int *owner);
// Parameter elements rank `rank` owns under whole_tensor_owners.
size_t owned_numel(const GPT2Layout *layout, const int *owner, int rank);

// FSDP: rows of tensor t in each rank's slice (ceil(rows / world)).
int row_slice_rows(const GPT2Tensor *tensor, int world);
// Elements of one slice, and of the whole padded tensor.
size_t row_slice_numel(const GPT2Tensor *tensor, int world);
size_t row_slice_padded_numel(const GPT2Tensor *tensor, int world);
// The rows of tensor's slice `rank` that hold real data, from *first (the rest
// of the slice is padding; 0 when all of it is).
int row_slice_real_rows(const GPT2Tensor *tensor, int world, int rank, int *first);

// ZeRO-1/2: elements in each rank's range, R = ceil(P / world); world times it is N R.
size_t flat_range_numel(size_t num_params, int world);
// Rank `rank`'s range [*begin, *end) of the padded flat model (end may pass P).
void flat_range(size_t num_params, int world, int rank, size_t *begin, size_t *end);
// The rank whose range holds flat element `element`.
int flat_range_owner(size_t num_params, int world, size_t element);
// The part of [first, first + count) inside rank `rank`'s range, as
// [*begin, *end); returns its length (0: none, and *begin == *end).
size_t flat_range_overlap(size_t num_params, int world, int rank, size_t first, size_t count, size_t *begin,
                          size_t *end);
// The pieces the ranges cut the tensors into: tensor t's are pieces
// [piece_start[t], piece_start[t + 1]) of all of them, one per range it meets.
// Returns piece_start, (num_tensors + 1) entries, for the caller to free.
int *flat_range_pieces(const GPT2Layout *layout, int world);

#endif
