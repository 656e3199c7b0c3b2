// zeropp.h: ZeRO++'s changes to a sharded strategy's communication (Wang et al.,
// 2023), as flags FSDP takes (docs/zeropp.md):
//
//   --quantize-weights int8   qwZ: training's all-gathers of parameters travel as
//                             int8 codes in blocks, a scale each (device/quantize.h),
//                             dequantized on arrival; the parameters kept, the
//                             optimizer and checkpoints stay in full precision
//   --quantize-block B        qwZ's and qgZ's block: B numbers a scale (default 256;
//                             each tensor's slice has blocks of its own)
//   --secondary-shard-group M hpZ: after a unit's forward each rank keeps 1/M of
//                             its gathered parameters, a secondary shard among the
//                             M consecutive ranks of its node, and the unit's
//                             backward all-gathers from those within the node
//
//   --quantize-grads int8|int4  qgZ: the reduce-scatter of gradients replaced by an
//                             all-to-all of quantized pieces (blocks of B, a scale
//                             each), each dequantized where it lands and summed in
//                             fp32 in rank order, then averaged: a piece is quantized
//                             once, not again at every hop of a ring
//
//   forward  unit u:  all-gather over N (qwZ: int8)  -> full tensors -> keep rows j of M (j: my place in the node)
//   backward unit u:  all-gather over M of the kept rows -> the same full tensors, bit for bit
//   after  backward:  block q of every gradient -> int8/int4 -> all-to-all -> N pieces of mine -> fp32 sum / N
//
// qwZ's wire for a slice of n numbers: n + 4 ceil(n/B) bytes (padded to 4)
// instead of 4n (fp32) or 2n (bf16): about 1/4 (1/2) of the all-gather's bytes.
// qgZ's: (N-1)/N of the gradients' pad(P) in 1 (int8) or 1/2 (int4) byte a
// number (+4 bytes a block) instead of the reduce-scatter's 4 or 2.
// hpZ's secondary shards: pad(P)/M parameters a rank, held from a unit's forward
// to its backward (counted as params_gathered); the backward's gathers move
// (M-1)/M pad(P) parameters inside the node and none across nodes.
#ifndef SHARDLAB_ZEROPP_H
#define SHARDLAB_ZEROPP_H

#include <stdint.h>

#include "device/quantize.h"
#include "kit/strategy.h"
#include "kit/unit_buffers.h"

#define ZEROPP_DEFAULT_BLOCK 256

typedef struct {
    const char *quantize_weights;  // NULL (not given) or "int8"
    uint64_t quantize_block;       // 0: not given (ZEROPP_DEFAULT_BLOCK)
    int secondary_shard_group;     // M ranks a node for hpZ (0: off)
    const char *quantize_grads;    // NULL (not given), "int8" or "int4"
} ZeroppOptions;

// The flags that set ZeroppOptions `options`, as entries of a CliOption table.
#define ZEROPP_FLAGS(options)                                                                                  \
    {"--quantize-weights", "int8", CLI_STRING, &(options).quantize_weights, 0, 0,                               \
     "ZeRO++'s qwZ: the parameters' all-gathers in training travel as int8 in blocks, one scale a block "      \
     "(default: as they are kept)"},                                                                           \
    {"--quantize-block", "B", CLI_UINT64, &(options).quantize_block, 1, 1 << 30,                               \
     "with --quantize-weights or --quantize-grads: numbers a scale (default 256; a tensor's slice has blocks "  \
     "of its own)"},       \
    {"--secondary-shard-group", "M", CLI_INT, &(options).secondary_shard_group, 1, 1 << 24,                    \
     "ZeRO++'s hpZ: keep 1/M of each unit's gathered parameters after its forward, and gather its backward's "  \
     "from the M consecutive ranks of a node (M divides the ranks that shard; default: off)"},                 \
    {"--quantize-grads", "int8|int4", CLI_STRING, &(options).quantize_grads, 0, 0,                             \
     "ZeRO++'s qgZ: the gradients' reduce-scatter becomes an all-to-all of int8 or int4 pieces in blocks, "     \
     "summed in fp32 where they land (default: a reduce-scatter of the gradients as kept)"}

// NULL, or what is wrong with the options once parsed (a value not known, a flag that does nothing).
const char *zeropp_problem(const ZeroppOptions *options);
// The wire of training's parameter gathers by the options (bits 0: as kept), with a note for strategy `name`.
QuantFormat zeropp_weights_format(const StrategyContext *ctx, const char *name, const ZeroppOptions *options);
// The wire of the gradients' reduces (bits 0: a reduce-scatter as kept), with a note.
QuantFormat zeropp_grads_format(const StrategyContext *ctx, const char *name, const ZeroppOptions *options);

// hpZ's secondary shards of one rank: for each unit, its rows of every tensor the
// unit's forward gathered, one tensor after another, until the unit's backward.
typedef struct {
    int on;
    Comm node;            // the M consecutive ranks of the sharding group this rank shares a node with
    int sharding_world;   // N: the ranks the primary slices are cut for (the padding's multiple)
    GPT2 *model;
    MemAccount *mem;
    void **kept;          // (num_units) NULL, or the unit's rows (padded numel / M of each tensor)
    size_t *kept_numel;   // (num_units)
} SecondaryShards;

// hpZ within groups of options->secondary_shard_group ranks of `sharding` (nothing when 0), for strategy `name`.
void secondary_init(SecondaryShards *h, const StrategyContext *ctx, Comm *sharding, const char *name,
                    const ZeroppOptions *options);
// After a unit's forward gather: keep this rank's rows of each of its tensors gathered (TENSOR_GATHERED). Unit
// 0's first drops every unit's that a forward-only pass (evaluation) left.
void secondary_keep(SecondaryShards *h, int unit, const TensorState *states);
// The ranks the unit's gather in `direction` (-1: backward) is among: the node, where hpZ keeps its rows, or `sharding`.
Comm *secondary_group(SecondaryShards *h, int unit, int direction, Comm *sharding);
// Copy-in of a gather `from` the node (secondary_group): the unit's kept rows into f's send, then dropped
// (nothing for a gather from elsewhere).
void secondary_pack(SecondaryShards *h, int unit, InFlight *f, const Comm *from);
// The unit's kept rows are no longer needed.
void secondary_drop(SecondaryShards *h, int unit);
void secondary_free(SecondaryShards *h);

#endif
