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

// One collective in flight with its copy-in (send) and copy-out (recv) buffers,
// counted as comm_buffers while it is open. The wire (kit/wire.h) starts it and
// finishes it; what it needs beyond these two buffers (ZeRO++'s quantized wires)
// is its own `leg`, closed with the buffers.
typedef struct {
    CommHandle handle;
    void *send, *recv;              // NULL when nothing is in flight
    size_t send_numel, recv_numel;  // elements of `dtype`
    DType dtype;
    // What inflight_pack put in send: one run a tensor, `packed` elements in all (a
    // reduce-scatter's: the runs of one rank's block, inflight_run).
    size_t *runs, packed;
    int num_runs;
    int filled;                     // send was filled by the wire (hpZ's rows kept since the forward): no packing
    Comm *comm;                     // the collective's ranks: an all-gather's recv holds their sends
    CommReduceOp op;                // a reduction's: the sum, or the average over the ranks
    void *leg;                      // NULL, or the wire's own buffers for the rest of the trip
    void (*close_leg)(void *leg, MemAccount *mem);
} InFlight;
// Allocates send, then recv, for a collective not already in flight on `f` (contents undefined: the
// copy-in fills send whole, the collective recv).
void inflight_open(InFlight *f, MemAccount *mem, size_t send_numel, size_t recv_numel, DType dtype);
// Copy-in: `count` elements of f->dtype from src go next into send, as a run of their own
// (nothing but the count where the wire filled send itself).
void inflight_pack(InFlight *f, const void *src, size_t count);
// A reduce-scatter's copy-in, made by the caller: the next `count` elements of every rank's block are
// a run of their own (one tensor's slice).
void inflight_run(InFlight *f, size_t count);
// Frees send and recv (and the wire's leg) once the copy-out is done.
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
