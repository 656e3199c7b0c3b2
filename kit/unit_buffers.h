// unit_buffers.h: what a sharding strategy lends the model while a unit runs.
//
// Between uses ZeRO-2 keeps only part of each gradient, ZeRO-3 and FSDP part of
// each parameter and gradient. Around a unit they hand the model full-size
// buffers to read and write, and collectives move the parts through
// copy-in/copy-out buffers. These are those mechanics,
// one call each in the strategies, so that `diff` between two strategies shows
// who holds what and which collective runs when, not how buffers are handed out.
//
// `rows_multiple`: a full buffer's dim 0 is padded up to a multiple of it (FSDP:
// N, so that every rank's slice has the same rows; the padding rows stay zero).
// 1 elsewhere: the tensor's own size.
#ifndef SHARDLAB_UNIT_BUFFERS_H
#define SHARDLAB_UNIT_BUFFERS_H

#include "comm/comm.h"
#include "device/memory.h"
#include "device/quantize.h"
#include "kit/strategy.h"

// model->params[t] becomes a new full-size buffer (params_gathered), its contents undefined until the
// gather that fills it; freed, NULL.
void alloc_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple);
void free_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple);
// Zeroed full-size gradients (grads_gathered) for every tensor of the unit that
// has none: a buffer still held, to add into, stays (an earlier micro-batch's
// under no-sync; the tied wte's from the head, until unit 0: ZeRO-2, ZeRO-3, FSDP). Freed, NULL.
void alloc_unit_grads(GPT2 *model, MemAccount *mem, int unit, int rows_multiple);
void free_full_grads(GPT2 *model, MemAccount *mem, int t, int rows_multiple);

// How a reduce-scatter's gradients travel: as they are kept (format.bits 0), or quantized (ZeRO++'s qgZ) by
// one all-to-all among all the ranks (node NULL), or in two hops: among the ranks of my node, then `across`,
// among the ranks of my place in every node.
typedef struct {
    QuantFormat format;
    Comm *node, *across;
} GradsWire;

// One collective in flight with its copy-in (send) and copy-out (recv) buffers,
// counted as comm_buffers while it is open.
typedef struct {
    CommHandle handle;
    void *send, *recv;              // NULL when nothing is in flight
    size_t send_numel, recv_numel;  // elements of `dtype`
    DType dtype;
    // What inflight_pack put in send: one run a tensor, `packed` elements in all (a
    // reduce-scatter's: the runs of one rank's block, inflight_run).
    size_t *runs, packed;
    int num_runs;
    // A quantized collective (ZeRO++): send's runs quantized (device/quantize.h) into wire_send,
    // `wire_bytes` a rank. qwZ's all-gather: the wires all-gathered as int8 into wire_recv, each
    // rank's dequantized into recv on arrival. qgZ's reduce-scatter: rank q's block of runs to rank q
    // by an all-to-all, the N parts that arrive dequantized and summed in fp32 in rank order, then
    // averaged, into recv. In two hops (node set): the parts my node's ranks send me, of the blocks of
    // my place in every node, summed in fp32 and quantized again, go to the nodes they are for (across).
    QuantFormat format;             // bits 0: none, the wire is send and recv themselves
    Comm *node, *across;            // qgZ in two hops (GradsWire), or NULL
    void *wire_send, *wire_recv;
    size_t wire_bytes;
    int wires_in;                   // wires wire_recv holds (an all-gather's, an all-to-all's: the ranks')
    int root;                       // qgZ's reduce to one rank: the rank of comm it goes to
    float *part, *sum;              // (recv_numel) qgZ's fp32 dequantized part and running sum, or NULL
    Comm *comm;                     // the collective's ranks: an all-gather's recv holds their sends
} InFlight;
// Allocates send, then recv, for a collective not already in flight on `f` (contents undefined: the
// copy-in fills send whole, the collective recv).
void inflight_open(InFlight *f, MemAccount *mem, size_t send_numel, size_t recv_numel, DType dtype);
// Copy-in: `count` elements of f->dtype from src go next into send, as a run of their own.
void inflight_pack(InFlight *f, const void *src, size_t count);
// A reduce-scatter's copy-in, made by the caller: the next `count` elements of every rank's block are
// a run of their own (one tensor's slice).
void inflight_run(InFlight *f, size_t count);
// Starts the all-gather of send into recv among comm's ranks (f->comm): as it is, or (format.bits 8) each run
// quantized in blocks of format.block, one scale a block (its wire buffers counted
// as comm_buffers too); inflight_wait dequantizes what arrives.
void inflight_all_gather_start(InFlight *f, Comm *comm, MemAccount *mem, QuantFormat format);
// Starts the reduce-scatter (average) of send into recv among comm's ranks: as it is, or (wire.format.bits
// 8 or 4) each rank's block of runs quantized and sent to it by an all-to-all; inflight_wait
// dequantizes the N parts that arrive and averages them in fp32. In two hops (wire.node), the
// all-to-all among the node's ranks starts here, and inflight_wait sums what it brought, sends it
// across and sums again.
void inflight_reduce_scatter_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire);
// Starts qgZ's reduce (average) of send into recv at rank `root` of comm, where a whole tensor is owned
// (recv_numel: send_numel there, 0 elsewhere): my runs quantized and gathered at the root, which
// dequantizes the N parts and averages them in fp32 in rank order. In two hops (wire.node): gathered first
// at my node's rank of the root's place, summed there in fp32 and quantized again, then at the root from
// the ranks of that place, one in each node (inflight_wait).
void inflight_reduce_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire, int root);
// Waits for the collective; 0 if none was in flight (nothing to copy out).
int inflight_wait(InFlight *f, Comm *comm);
// Frees send and recv (and the wire's) once the copy-out is done.
void inflight_close(InFlight *f, MemAccount *mem);

// Whether tensor t, gathered for `unit`, is freed after the unit's pass in `direction`.
// Forward (+1, in training): when no later unit reads it (the tied wte stays from unit 0
// to the head), but never in the last unit, whose backward comes next. Backward (-1): in
// the unit it is at home in, whose backward finishes its gradient (the tied wte: unit 0).
// 0 (a forward-only pass, the model written out): at once. So wte is gathered once a forward and
// backward (a step, without --grad-accum), and its gradient, the head's and the embedding's added
// up, reduced once where the micro-batch reduces.
int released_after(const GPT2Layout *layout, int t, int unit, int direction);

// How many of the `prefetch` units after `unit` in `direction` (+1 forward, -1
// backward, 0: none) exist.
int units_ahead(const GPT2Layout *layout, int unit, int direction, int prefetch);
// Copies the parameters of the tensors at home in the unit (whole in
// model->params) into `flat`, llm.c's layout in fp32, on the host.
void unit_params_to_host(const GPT2 *model, int unit, float *flat);

#endif
