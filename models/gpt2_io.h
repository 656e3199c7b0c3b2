// gpt2_io.h: llm.c's model checkpoint and debug-state files, so shardlab and
// llm.c can read each other's models.
//
// Checkpoint: int32 header[256] = {20240326, 3 (fp32), maxT, V, L, NH, C, Vp, 0...},
//             then all parameters as fp32 in llm.c's order (see gpt2.h).
// Debug state: int32 header[256] = {20240327, 2, B, T, 0...}, int32 x (B,T),
//             int32 y (B,T), fp32 logits (B,T,V), fp32 loss, fp32 grads (all params).
#ifndef SHARDLAB_GPT2_IO_H
#define SHARDLAB_GPT2_IO_H

#include <stdint.h>
#include <stdio.h>

#include "models/gpt2.h"

#define GPT2_CHECKPOINT_MAGIC 20240326
#define GPT2_CHECKPOINT_VERSION_FP32 3
#define GPT2_DEBUG_STATE_MAGIC 20240327
#define LLMC_HEADER_INTS 256

// Reads and checks a checkpoint's header (magic, version, sizes, file length).
void gpt2_checkpoint_read_config(const char *path, GPT2Config *config);
// Reads rows [row_begin, row_begin + row_count) of tensor t from a checkpoint
// whose header matched `layout`: a rank reads only the bytes it holds.
void gpt2_checkpoint_read_rows(const char *path, const GPT2Layout *layout, int t, int row_begin,
                               int row_count, float *out);
// Writes a whole checkpoint from one flat buffer in llm.c's layout.
void gpt2_checkpoint_write(const char *path, const GPT2Config *config, const float *flat_params,
                           size_t num_params);

// Where initial parameters come from: an llm.c checkpoint, or the seeded
// initializer (gpt2_init_rows). Either way a rank can read just the rows it holds.
typedef struct {
    const char *checkpoint_path;  // NULL: initialize from seed
    uint64_t seed;
    int dry;                      // build/plan's dry run: no values at all (the rows are left as they are)
} ParamSource;

// Rows [row_begin, row_begin + row_count) of tensor t.
void param_source_rows(const ParamSource *src, const GPT2Layout *layout, int t, int row_begin, int row_count,
                       float *out);

typedef struct {
    int B, T;
    int *inputs;     // (B,T)
    int *targets;    // (B,T)
    float *logits;   // (B,T,V)
    float loss;
    float *grads;    // (num_params) in llm.c's layout
} GPT2DebugState;

void gpt2_debug_state_read(const char *path, const GPT2Layout *layout, GPT2DebugState *state);
void gpt2_debug_state_write(const char *path, const GPT2Layout *layout, const GPT2DebugState *state);
void gpt2_debug_state_free(GPT2DebugState *state);

#endif
