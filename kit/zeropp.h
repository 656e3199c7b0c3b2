// zeropp.h: ZeRO++'s changes to a sharded strategy's communication (Wang et al.,
// 2023), as flags FSDP and ZeRO-3 take (docs/zeropp.md); on ZeRO-3, whose tensors are owned
// whole, a gather is a broadcast from the owner and a reduce-scatter a reduce to it:
//
//   --quantize-weights int8      qwZ: training's all-gathers of parameters travel as
//                                int8 codes in blocks, a scale each (device/quantize.h),
//                                dequantized on arrival; the parameters kept, the
//                                optimizer and checkpoints stay in full precision
//   --secondary-shard-group H    hpZ: after a unit's forward each rank keeps 1/H of
//                                each of its gathered tensors that the forward frees
//                                (not the head's, nor the tied wte), the rows of its place
//                                among the H consecutive ranks of its node (ZeRO-3: the
//                                whole tensors of owners at its place elsewhere), and
//                                the unit's backward gathers those within the node
//   --quantize-grads int8|int4   qgZ: the reduce-scatter of gradients replaced by an
//                                all-to-all of quantized parts (ZeRO-3: the reduce by a
//                                gather at the owner), each dequantized where it lands
//                                and summed in fp32 in rank order, then averaged: a part
//                                is quantized once, not again at every hop of a ring
//   --quantize-grads-node H      qgZ in two hops, as the paper's: the all-to-all among
//                                the H consecutive ranks of a node, each rank summing
//                                what it got for its place in every node, quantizing
//                                the sums again, and a second all-to-all among the ranks
//                                of its place in every node: 1/H as much crosses nodes
//   --quantize-block Z           qwZ's and qgZ's blocks: Z numbers a scale (default
//                                256; each tensor's slice has blocks of its own)
//
// FSDP's (ZeRO-3's: docs/zeropp.md):
//   forward  unit u:  all-gather over N (qwZ: int8)  -> full tensors -> keep rows j of H (j: my place in the node)
//                     of each tensor the forward frees (not the head's, nor wte)
//   backward unit u:  all-gather over H of the kept rows -> the same full tensors, bit for bit
//   after  backward:  rank q's rows of every gradient at home in u -> int8/int4 -> all-to-all -> N parts of mine
//                     -> fp32 sum / N
//     in two hops:    -> all-to-all in the node -> H parts of my place's blocks -> fp32 sums, int8/int4
//                     -> all-to-all across, among my place's N/H ranks -> N/H parts of mine -> fp32 sum / N
//
// FSDP, with pad(P) its padded parameters and pad(P_h) the head's (lnfw, lnfb and the
// tied wte, gathered once a step and kept into the backward), per rank per step: qwZ's
// gathers move (N-1)/N (2 pad(P) - pad(P_h)) (1 + 4/Z) bytes instead of
// (N-1)/N (2 pad(P) - pad(P_h)) b (b = 4 fp32, 2 bf16); qgZ's gradients (N-1)/N pad(P)
// (1 + 4/Z) (int8) or (1/2 + 4/Z) (int4) bytes instead of (N-1)/N pad(P) b_g (in two hops,
// (H-1)/H pad(P) (1 + 4/Z) inside the node and (N/H-1)/N pad(P) (1 + 4/Z) across); hpZ's
// backward gathers (H-1)/H (pad(P) - pad(P_h)) b inside the node and none across, for
// (pad(P) - pad(P_h))/H parameters a rank held from each unit's forward to its backward
// (counted as params_gathered).
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
    int secondary_shard_group;     // H ranks a node for hpZ (0: off)
    const char *quantize_grads;    // NULL (not given), "int8" or "int4"
    int quantize_grads_node;       // H ranks a node for qgZ's two hops (0: one hop among all)
} ZeroppOptions;

// The flags that set ZeroppOptions `options`, as entries of a CliOption table (FSDP's and ZeRO-3's
// words: a gather is ZeRO-3's broadcast, an all-to-all of gradients its gather at the owner).
#define ZEROPP_GATHER_FLAGS(options)                                                                           \
    {"--quantize-weights", "int8", CLI_STRING, &(options).quantize_weights, 0, 0,                               \
     "ZeRO++'s qwZ: the parameters' gathers in training travel as int8 in blocks, one scale a block "          \
     "(default: as they are kept)"},                                                                           \
    {"--quantize-block", "Z", CLI_UINT64, &(options).quantize_block, 1, 1 << 30,                               \
     "with --quantize-weights or --quantize-grads: numbers a scale (default 256; a tensor's slice has blocks "  \
     "of its own)"},                                                                                           \
    {"--secondary-shard-group", "H", CLI_INT, &(options).secondary_shard_group, 1, 1 << 24,                    \
     "ZeRO++'s hpZ: keep a secondary copy of what each unit's forward frees, 1/H a rank, "                    \
     "and gather its backward's from the H consecutive ranks of a node (H divides the ranks that shard, "      \
     "fewer than all; omit for none)"}
#define ZEROPP_FLAGS(options)                                                                                  \
    ZEROPP_GATHER_FLAGS(options),                                                                              \
    {"--quantize-grads", "int8|int4", CLI_STRING, &(options).quantize_grads, 0, 0,                             \
     "ZeRO++'s qgZ: the gradients' reduce-scatter (ZeRO-3: reduce) becomes an all-to-all (gather at the "     \
     "owner) of int8 or int4 parts in blocks, summed in fp32 where they land (default: as kept)"},             \
    {"--quantize-grads-node", "H", CLI_INT, &(options).quantize_grads_node, 1, 1 << 24,                        \
     "with --quantize-grads: in two hops, among the H consecutive ranks of a node, then across nodes (H "       \
     "divides the ranks that shard, 1 < H < them; default: one hop among all)"}

// NULL, or what is wrong with the options once parsed (a value not known, a flag that does nothing).
const char *zeropp_problem(const ZeroppOptions *options);

// hpZ's secondary shards of one rank: for each unit, from its forward to its backward, its rows of
// every tensor the unit's forward gathered and frees (FSDP), or, where tensors are owned whole (ZeRO-3), the
// whole tensors whose owner has its place in another node: one tensor after another.
typedef struct {
    int on;
    Comm *node;           // the H consecutive ranks of the sharding group this rank shares a node with (wire.c's)
    int sharding_world;   // N: the ranks the primary slices are cut for (the padding's multiple)
    int sharding_rank;
    const int *owner;     // (num_tensors) the sharding rank that owns tensor t whole, or NULL: rows
    GPT2 *model;
    MemAccount *mem;
    const TensorState *states;  // (num_tensors) the strategy's: SHARDED_POST_FORWARD from a forward to its
                                // backward's gather (the same on every rank), where the node keeps the tensor
    void **kept;          // (num_units) NULL, or what this rank keeps of the unit
    size_t *kept_numel;   // (num_units)
    size_t *taken;        // (num_units) whole tensors: elements of kept[unit] copied out so far
} SecondaryShards;

// hpZ within `node` (NULL: off), nodes of the ranks of `sharding`; `owner`: NULL, or (num_tensors) each
// tensor's owner among `sharding` (tensors owned whole).
void secondary_init(SecondaryShards *h, const StrategyContext *ctx, Comm *sharding, Comm *node, const int *owner,
                    const TensorState *states);
// After a unit's forward gather: keep this rank's rows of each of its tensors gathered (TENSOR_GATHERED) that
// the forward frees after the unit (released_after), or the whole tensors of those it holds for its node (their
// owner's place in the node is its own, the owner elsewhere).
// Unit 0's first drops every unit's that a forward-only pass (evaluation) left.
void secondary_keep(SecondaryShards *h, int unit, const TensorState *states);
// The ranks the unit's gather in `direction` (-1: backward) is among: the node, where hpZ keeps its tensors
// (TENSOR_SHARDED_POST_FORWARD), or `sharding`.
Comm *secondary_group(SecondaryShards *h, int unit, int direction, Comm *sharding);
// Copy-in of a gather `from` the node (secondary_group): the unit's kept rows into f's send, which is then
// filled (InFlight.filled), and dropped (nothing for a gather from elsewhere).
void secondary_pack(SecondaryShards *h, int unit, InFlight *f, const Comm *from);
// The unit's kept rows (or whole tensors) are no longer needed: freed.
void secondary_drop(SecondaryShards *h, int unit);
void secondary_free(SecondaryShards *h);

// Whole tensors: if this rank kept tensor t of the unit, copies it into `dst` and returns 1 (the unit's
// copies freed once all are taken); else 0.
int secondary_unpack_whole(SecondaryShards *h, int unit, int t, void *dst);

// How a reduce's gradients travel under qgZ: quantized (format), by one hop among all the ranks
// (node NULL), or in two: among the ranks of my node, then `across`, among the ranks of my place in
// every node.
typedef struct {
    QuantFormat format;
    Comm *node, *across;
} GradsWire;

// The quantized legs of one collective (InFlight.leg): send's runs quantized (device/quantize.h) into
// wire_send, `wire_bytes` a rank. qwZ's all-gather: the wires all-gathered as int8 into wire_recv,
// each rank's dequantized into recv on arrival. qgZ's reduce-scatter: rank q's block of runs to rank
// q by an all-to-all, the N parts that arrive dequantized and summed in fp32 in rank order (then
// averaged, for COMM_AVG) into recv. In two hops (node set): the parts my node's ranks send me, of
// the blocks of my place in every node, summed in fp32 and quantized again, go to the nodes they are
// for (across). qgZ's reduce to one rank: the same with a gather at the root.
typedef struct {
    QuantFormat format;
    Comm *node, *across;            // qgZ in two hops (GradsWire), or NULL
    void *wire_send, *wire_recv;
    size_t wire_bytes;
    int wires_out, wires_in;        // wires wire_send and wire_recv hold
    int root;                       // qgZ's reduce to one rank: the rank of the collective's comm it goes to
    float *part, *sum;              // (sum_numel) qgZ's fp32 dequantized part and running sum, or NULL
    size_t sum_numel;               // the collective's packed elements, where parts are summed
} QuantLeg;

// qwZ: starts the all-gather of f's send into recv among comm's ranks, each run quantized in blocks
// (its wires counted as comm_buffers too).
void qwz_all_gather_start(InFlight *f, Comm *comm, MemAccount *mem, QuantFormat format);
// qgZ: starts the reduce-scatter (f->op) of f's send into recv among comm's ranks: each rank's block of
// runs quantized and sent to it by an all-to-all (in two hops, the first among the node's ranks).
void qgz_reduce_scatter_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire);
// qgZ: starts the reduce (f->op) of f's send into recv at rank `root` of comm, where a whole tensor is
// owned (recv_numel: send_numel there, 0 elsewhere): my runs quantized and gathered at the root, which
// dequantizes the N parts and adds them in fp32 in rank order. In two hops (wire.node): gathered first
// at my node's rank of the root's place, summed there in fp32 and quantized again, then at the root from
// the ranks of that place, one in each node.
void qgz_reduce_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire, int root);
// Waits for a quantized collective and finishes its trip: dequantizes what arrived; in two hops, runs
// the second hop (an all-to-all or a gather across the nodes, blocking) and sums again.
void quantized_finish(InFlight *f);

// What the owner of a whole tensor computes with under qwZ where no wire carries it (hpZ's backward,
// in its own node): `src` quantized and dequantized into `dst`, the weights every other rank has.
void quantize_round_trip(MemAccount *mem, QuantFormat format, void *dst, const void *src, size_t numel, DType dtype);

#endif
