// wire.h: how a sharded strategy's collectives travel. ZeRO-3 and FSDP call theirs by
// name, with the reduce op in the open (wire_broadcast_start, wire_reduce_start(..., COMM_AVG);
// wire_all_gather_start, wire_reduce_scatter_start(..., COMM_AVG)); the wire, configured once
// at init from the run's options, decides how the bytes go, and nothing else does:
//
//   as they are kept      one collective among the ranks that shard (the default)
//   --shard-group M       hybrid groups (PyTorch's HYBRID_SHARD): FSDP's collectives among the M
//                         consecutive ranks of my group, and after each reduce-scatter an all-reduce
//                         (the same op) of the reduced slices across the groups, which hold the same
//                         slices: 2 (G-1)/G * 4 pad(P)/M bytes a step with G = N/M groups
//   --shard-min-numel M   tensors of fewer than M elements kept whole on every rank (kit/replicas.h):
//                         their gradients averaged by one all-reduce a unit, beside its reduce-scatter
//   ZeRO++ (zeropp.h)     qwZ: parameters gathered as int8; hpZ: the backward's gathers inside the
//                         node, from a copy kept since the forward; qgZ: gradients reduced by an
//                         all-to-all (ZeRO-3: a gather at the owner) of int8/int4 parts, in one hop
//                         or two
//
//   strategy:  wire_reduce_scatter_start(w, f, unit, COMM_AVG)     wire_reduce_scatter_finish(w, f, unit)
//   wire:      the whole tensors' all-reduce                        waits for it
//              plain: comm_reduce_scatter_start(.., op)            comm_wait
//              qgZ:   qgz_reduce_scatter_start (zeropp.c)          quantized_finish: sums, 2nd hop
//                                                                  hybrid: comm_all_reduce across (op)
//
// A `_finish` waits for the collective and then completes its trip, which may run collectives of
// its own, blocking (qgZ's second hop, the all-reduce across hybrid groups): the strategy's
// finish_reduce is where those happen. The wire makes every process group a strategy uses, here.
#ifndef SHARDLAB_WIRE_H
#define SHARDLAB_WIRE_H

#include <stdint.h>

#include "kit/replicas.h"
#include "kit/strategy.h"
#include "kit/unit_buffers.h"
#include "kit/zeropp.h"

// The options that change how the collectives travel, set by the strategies' flags.
typedef struct {
    int shard_group;           // M: ranks that shard the model among them (0: all N); FSDP only
    uint64_t shard_min_numel;  // tensors of fewer elements kept whole on every rank (0: none); FSDP only
    ZeroppOptions zeropp;      // ZeRO++'s (kit/zeropp.h)
} WireOptions;

typedef struct {
    GPT2 *model;
    MemAccount *mem;
    Comm *world;                    // all N ranks
    Comm *comm;                     // the ranks that shard: all N, or this rank's hybrid group
    int hybrid;                     // M < N: group and across exist
    Comm group, across;             // hybrid: my group of M; the N/M ranks at my place in every group
    Replicas replicas;              // the tensors kept whole (FSDP's), all-reduced beside a unit's reduce-scatter
    Replicas *whole;                // &replicas where a strategy's tensors may be kept whole, else NULL
    CommHandle *whole_reduces;      // (num_units) their all-reduce in flight
    QuantFormat weights;            // qwZ: training's parameter gathers (bits 0: as kept)
    GradsWire grads;                // qgZ: the gradients' reduces (format.bits 0: as kept)
    Comm node, grads_node, grads_across;  // hpZ's node; qgZ's two hops' ranks (grads points here)
    SecondaryShards secondary;      // hpZ
    void **wires;                   // (num_tensors) qwZ's broadcast wire of a whole tensor in flight, or NULL
    Comm **broadcast_group;         // (num_tensors) the ranks a whole tensor's last broadcast was among
    InFlight *reduces;              // (num_tensors) qgZ's reduce of a whole tensor's gradient in flight
} Wire;

// Configures w from `options` for strategy `name` (its notes and errors). `owner`: NULL where every tensor is
// sliced (FSDP), or (num_tensors) each tensor's owner (ZeRO-3: whole tensors). `states`: (num_tensors) the
// strategy's tensor states, which the wire reads (hpZ: which tensors its node keeps) and, where tensors are
// sliced, marks TENSOR_REPLICATED for those of fewer than options->shard_min_numel elements, kept whole on
// every rank (kit/replicas.h). Returns the ranks that shard the model.
// w must stay where it is: its groups are pointed at.
Comm *wire_init(Wire *w, const StrategyContext *ctx, const char *name, const WireOptions *options, const int *owner,
                TensorState *states);
// The state of a tensor the strategy releases after its pass in `direction`: TENSOR_SHARDED, or after a
// forward with hpZ TENSOR_SHARDED_POST_FORWARD (the node keeps it until the backward's gather).
TensorState wire_released(const Wire *w, int direction);
// The tensors kept whole join `part`'s AdamW steps, EMA swaps and gradient spans (replicas_join).
void wire_join_whole(Wire *w, Resident *part);
// Fills *rows with every row of tensor t and returns 1 if it is kept whole (world rank 0 writes them); else 0.
int wire_whole_rows(Wire *w, int t, LocalRows *rows);
// NULL, or what is wrong with the options once parsed (a value not known, a flag that does nothing).
const char *wire_problem(const WireOptions *options);
void wire_free(Wire *w);
// 1 on the ranks of the first hybrid group (every rank without groups): every group holds the same
// slices, the first group's write checkpoints and count in the norm.
int wire_first_group(const Wire *w);

// ---- FSDP's: one collective a unit, through InFlight's copy-in and copy-out ----

// Opens f for the all-gather of the unit in `direction` (+1 forward, -1 backward, 0 neither): send for
// my `pack` elements, recv for every rank's; or, hpZ's backward, send filled with my node's rows kept
// since the forward (inflight_pack then packs nothing) and f->comm the node, whose sends fill recv.
// Nothing when pack is 0: every tensor of the unit is here or on its way, and start does nothing either.
void wire_all_gather_open(Wire *w, InFlight *f, int unit, int direction, size_t pack, DType dtype);
// Starts it (qwZ, in training: in int8).
void wire_all_gather_start(Wire *w, InFlight *f, int direction);
// Waits for it, if one is in flight (0: none), and dequantizes what arrived.
int wire_all_gather_finish(Wire *w, InFlight *f);
// Starts the unit's whole tensors' all-reduce (`op`), if it has any, and f's reduce-scatter (`op`), if f is
// open: block r of send lands, reduced, on rank r (qgZ: by an all-to-all of quantized parts).
void wire_reduce_scatter_start(Wire *w, InFlight *f, int unit, CommReduceOp op);
// Waits for the unit's whole tensors' all-reduce, and for f's reduce-scatter if one is in flight (0: none),
// then completes its trip, blocking: qgZ's second hop; the all-reduce across hybrid groups.
int wire_reduce_scatter_finish(Wire *w, InFlight *f, int unit);

// ---- ZeRO-3's: one collective a tensor, in model->params[t] and model->grads[t] ----

// Starts the broadcast of tensor t of `unit` (in `direction`) from its owner `root` into model->params[t], a
// full buffer on the other ranks (qwZ, in training: a copy on the owner too, everyone dequantizing the same
// int8 wire; hpZ's backward: from the rank of the owner's place in my node).
CommHandle wire_broadcast_start(Wire *w, int unit, int t, int direction, int root);
// Waits for it (0 if none was in flight), and dequantizes the wire.
int wire_broadcast_finish(Wire *w, CommHandle *h, int t);
// Starts the reduce (`op`) of model->grads[t] onto its owner `root`, in place there (qgZ: a gather of
// quantized parts at the root, added in fp32, the returned handle inactive: the wire holds it).
CommHandle wire_reduce_start(Wire *w, int t, int root, CommReduceOp op);
// Waits for it, the result then in the owner's model->grads[t] (qgZ's second hop, blocking); 0 if none
// was in flight.
int wire_reduce_finish(Wire *w, CommHandle *h, int t);

// ---- both ----

// After a unit's gather in `direction` has made it whole: hpZ keeps my node's share of what the forward
// frees (zeropp.h's secondary_keep); nothing else.
void wire_unit_gathered(Wire *w, int unit, int direction, const TensorState *states);

#endif
