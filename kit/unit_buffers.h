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

// model->params[t] becomes a new full-size buffer (params_gathered); freed, NULL.
void alloc_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple);
void free_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple);
// Zeroed full-size gradients (grads_gathered) for every tensor of the unit that
// has none: a buffer still held, to add into, stays (an earlier micro-batch's
// under no-sync; ZeRO-2's wte from the head, until unit 0). Freed, NULL.
void alloc_unit_grads(GPT2 *model, MemAccount *mem, int unit, int rows_multiple);
void free_full_grads(GPT2 *model, MemAccount *mem, int t, int rows_multiple);

// One collective in flight with its copy-in (send) and copy-out (recv) buffers,
// counted as comm_buffers while it is open.
typedef struct {
    CommHandle handle;
    void *send, *recv;              // NULL when nothing is in flight
    size_t send_numel, recv_numel;  // elements of `dtype`
    DType dtype;
} InFlight;
// Allocates send, then recv, for a collective not already in flight on `f`.
void inflight_open(InFlight *f, MemAccount *mem, size_t send_numel, size_t recv_numel, DType dtype);
// Waits for the collective; 0 if none was in flight (nothing to copy out).
int inflight_wait(InFlight *f, Comm *comm);
// Frees send and recv once the copy-out is done.
void inflight_close(InFlight *f, MemAccount *mem);

// How many of the `prefetch` units after `unit` in `direction` (+1 forward, -1
// backward, 0: none) exist.
int units_ahead(const GPT2Layout *layout, int unit, int direction, int prefetch);
// Copies the parameters of the tensors at home in the unit (whole in
// model->params) into `flat`, llm.c's layout in fp32, on the host.
void unit_params_to_host(const GPT2 *model, int unit, float *flat);

#endif
