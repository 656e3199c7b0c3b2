// fsdp.c: Fully Sharded Data Parallel by dim-0 slicing: rank r keeps slice r (dim 0 cut into
// N equal slices, padded with zero rows) of every tensor, its gradient and its AdamW state.
// Before a unit runs (forward, and again backward) one all-gather rebuilds its full tensors,
// freed after forward (--reshard-after-forward 0: kept until backward); after its backward
// one reduce-scatter leaves each rank the averaged gradient of its own slices (the head and
// wte, gathered once, stay into their backward; wte's two gradients add up, reduced once).
//
//   qkvw (3C, C):  rows 0..k-1 -> rank 0 | rows k..2k-1 -> rank 1 | ... (padded)
//   before unit u:  pack my slices -> all-gather -> unpack full tensors
//   after  unit u:  pack full grads by rank -> reduce-scatter(avg) -> my slices +=
// Per rank: 16 bytes per parameter / N (padded). Per step: all-gathers of 2 pad(P) - pad(P_h)
// (P_h: the head's, wte included), one reduce-scatter of pad(P); unresharded, pad(P) gathered once.
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master joins the AdamW state: 2 + 2 + 12 bytes per parameter, and half
// the bytes on the wire.
//
// With --prefetch D the next D units' gathers are started before unit u
// computes, and unit u's reduces are waited for only after the next unit's
// backward: the same collectives, travelling under compute.
// --shard-group M: all of it within groups of M ranks, slices then averaged across the
// groups (kit/shard_groups.h); --shard-min-numel NUMEL: small tensors whole (kit/replicas.h).
#include <stdlib.h>

#include "kit/kit.h"
#include "fsdp/fsdp.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    ShardGroups groups;              // --shard-group M < N: comm is this rank's group of M, replicas across them
    int reshard_after_forward;
    Resident resident;               // this rank's slice of every tensor (row_slice_numel), padding included
    Replicas replicas;               // --shard-min-numel: the tensors kept whole on every rank instead
    TensorState *tensor_state;       // (num_tensors) SHARDED, GATHERING (in flight), GATHERED (whole here)
    int prefetch;                    // units ahead whose gathers start before they run
    InFlight *gathers, *reduces;     // (num_units) each unit's all-gather, reduce-scatter in flight
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
    Zeropp zeropp;                   // ZeRO++ (kit/zeropp.h): qwZ's and qgZ's wires, hpZ's secondary shards
} State;

// Starts one all-gather for every tensor of the unit neither here nor on its
// way, of my slices (qwZ: quantized), or in a backward with hpZ of my node's rows
// kept since the forward. Copy-in: my part of each, one after another, into `send`.
static void start_gather(State *s, int unit, int direction) {
    const GPT2Layout *layout = &s->model->layout;
    InFlight *g = &s->gathers[unit];
    Comm *from = secondary_group(&s->zeropp.secondary, unit, direction, s->comm);
    size_t pack = resident_unit_numel(&s->resident, layout, unit, s->tensor_state) * (s->comm->world / from->world);
    if (pack == 0) return;
    inflight_open(g, s->mem, pack, pack * from->world, s->model->param_dtype);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_SHARDED) continue;
        if (from == s->comm) inflight_pack(g, resident_params(&s->resident, t), s->resident.flat.count[t]);
        s->tensor_state[t] = TENSOR_GATHERING;
    }
    secondary_pack(&s->zeropp.secondary, unit, g, from);
    inflight_all_gather_start(g, from, s->mem, from == s->comm && direction ? s->zeropp.weights_wire : (QuantFormat){0, 0});
}

// Waits for the unit's all-gather, if one is in flight. Copy-out: recv holds rank 0's
// pack, then rank 1's, ...; slice r of tensor t goes to rows [r*k, (r+1)*k) of a full buffer.
static void finish_gather(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->param_dtype;
    InFlight *g = &s->gathers[unit];
    size_t at = 0;
    if (!inflight_wait(g, g->comm)) return;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERING) continue;
        size_t slice = s->resident.flat.count[t] * (size_t)(s->comm->world / g->comm->world);  // hpZ: a node rank's
        alloc_full_params(s->model, s->mem, t, s->comm->world);
        for (int r = 0; r < g->comm->world; r++)
            device_copy_as(dtype_at(s->model->params[t], r * slice, dtype), dtype_at(g->recv, r * g->send_numel + at, dtype),
                           slice, dtype);
        at += slice;
        s->tensor_state[t] = TENSOR_GATHERED;
    }
    inflight_close(g, s->mem);
}

// The unit's parameters, whole, now; the next `prefetch` units' gathers (in
// `direction`, +1 forward, -1 backward) start behind it, to travel meanwhile.
static void gather_unit(State *s, int unit, int direction) {
    int ahead = units_ahead(&s->model->layout, unit, direction, s->prefetch);
    for (int k = 0; k <= ahead; k++) start_gather(s, unit + direction * k, direction);
    finish_gather(s, unit);
    if (direction > 0) secondary_keep(&s->zeropp.secondary, unit, s->tensor_state);
}

// Frees the unit's gathered tensors that the pass in `direction` is done with (released_after).
static void release_unit(State *s, int unit, int direction) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERED || !released_after(layout, t, unit, direction)) continue;
        free_full_params(s->model, s->mem, t, s->comm->world);
        s->tensor_state[t] = TENSOR_SHARDED;
    }
}

// Starts one reduce-scatter for the gradients the unit finishes (those at home in it). Copy-in:
// block r of `send` holds rank r's rows of each, to land, reduced, on rank r.
static void start_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    InFlight *r = &s->reduces[unit];
    size_t pack = resident_unit_numel(&s->resident, layout, unit, NULL), at = 0;
    replicas_start_reduce(&s->replicas, unit);
    if (pack == 0) return;
    inflight_open(r, s->mem, pack * s->comm->world, pack, dtype);
    for (int i = 0; i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->resident.flat.count[t];
        for (int q = 0; q < s->comm->world; q++)
            device_copy_as(dtype_at(r->send, q * pack + at, dtype), dtype_at(s->model->grads[t], q * slice, dtype), slice,
                           dtype);
        inflight_run(r, slice);
        at += slice;
    }
    inflight_reduce_scatter_start(r, s->comm, s->mem, s->zeropp.grads_wire);
}

// Waits for the unit's reduce-scatter, if one is in flight (and across the groups). Copy-out: my
// slices add into my resident gradient; everyone frees the full gradients.
static void finish_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    InFlight *r = &s->reduces[unit];
    size_t at = 0;
    replicas_finish_reduce(&s->replicas, unit);
    if (!shard_groups_wait(&s->groups, r)) return;
    for (int i = 0; i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] == TENSOR_REPLICATED) continue;  // its gradient is its own, for good
        device_add_as(resident_grads(&s->resident, t), dtype_at(r->recv, at, dtype), s->resident.flat.count[t], dtype);
        at += s->resident.flat.count[t];
        free_full_grads(s->model, s->mem, t, s->comm->world);
    }
    inflight_close(r, s->mem);
    resident_unit_final(&s->resident, unit);
}

static void before_forward(void *state, int unit) { gather_unit(state, unit, +1); }
static void after_forward(void *state, int unit, int backward_follows) {
    State *s = state;
    if (s->reshard_after_forward) release_unit(s, unit, backward_follows ? +1 : 0);
}

// Fetch the unit again, and give it zeroed full-size gradient buffers (or the
// ones an earlier micro-batch kept, without a reduce, to add into).
static void before_backward(void *state, int unit) {
    State *s = state;
    gather_unit(s, unit, -1);
    alloc_unit_grads(s->model, s->mem, unit, s->comm->world);
}

// Reduce the unit's gradients: with prefetch behind the next unit's backward (waited
// for after it), else at once; no_sync keeps every full gradient until the last micro-batch.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch || s->accum_mode == ACCUM_SYNC_EACH) {
        start_reduce(s, unit);
        if (s->prefetch == 0) finish_reduce(s, unit);
        if (unit + 1 < s->model->layout.num_units) finish_reduce(s, unit + 1);
        // the next micro-batch's head must find no gradient still on its way
        if (unit == 0 && !last_micro_batch) finish_reduce(s, 0);
    }
    release_unit(s, unit, -1);
}

// Unit 0's reduces may still be in flight.
static void finish_grads(void *state) { finish_reduce(state, 0); }

static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
    replicas_step(&s->replicas, config);
}

// Unit by unit: fetch, let rank 0 copy what is at home in the unit, release.
static void gather_full_model(void *state, float *flat) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) {
        gather_unit(s, u, 0);
        if (s->groups.world->rank == 0) unit_params_to_host(s->model, u, flat);
        release_unit(s, u, 0);
    }
}

// Rank r keeps rows [r*k, (r+1)*k) of every tensor, less padding (r: in its shard group).
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    if (replicas_rows(&s->replicas, t, rows)) return 1;
    int first, count = row_slice_real_rows(&s->model->layout.tensors[t], s->comm->world, s->comm->rank, &first);
    if (count == 0) return 0;
    *rows = resident_rows(&s->resident, t, first, count, shard_groups_first(&s->groups));
    return 1;
}

// This rank's slices, padding (zero) included, its first group's the norm's; then the whole tensors.
static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    spans[0] = resident_grad_span(&s->resident, shard_groups_first(&s->groups));
    return 1 + replicas_grad_span(&s->replicas, &spans[1]);
}

// The EMA of the weights this rank keeps takes their place, or gives it back.
static void swap_ema(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // a gathered copy would be stale
    resident_swap_ema(&s->resident);
    replicas_swap_ema(&s->replicas);
}

static void destroy(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // what a forward-only pass kept
    resident_free(&s->resident, s->mem);
    replicas_free(&s->replicas);
    zeropp_free(&s->zeropp);
    shard_groups_free(&s->groups);
    free(s->tensor_state);
    free(s->gathers);
    free(s->reduces);
    free(s);
}

Strategy fsdp_init(const StrategyContext *ctx) {
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    const FsdpOptions *options = ctx->options;
    s->model = model;
    s->comm = shard_groups_init(&s->groups, ctx, "fsdp", options->shard_group);
    s->mem = ctx->mem;
    s->accum_mode = ctx->accum_mode;
    s->reshard_after_forward = options->reshard_after_forward;
    s->prefetch = strategy_prefetch(ctx, "fsdp", options->prefetch);
    zeropp_init(&s->zeropp, ctx, s->comm, "fsdp", &options->zeropp, NULL);
    s->gathers = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->reduces = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->tensor_state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState));  // all TENSOR_SHARDED
    replicas_init(&s->replicas, ctx, options->shard_min_numel, s->tensor_state);  // but the small ones
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++)
        count[t] = replicas_slice_numel(&s->replicas, t, row_slice_numel(&layout->tensors[t], s->comm->world));
    resident_init(&s->resident, model, count, s->mem);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        // each rank makes its own rows; rows past the end (padding) stay zero
        int first, rows = row_slice_real_rows(&layout->tensors[t], s->comm->world, s->comm->rank, &first);
        if (rows > 0 && s->resident.flat.count[t] > 0)  // not a tensor kept whole
            resident_load_rows(&s->resident, layout, &ctx->source, t, first, rows);
    }
    return STRATEGY_TABLE("fsdp", s);
}
