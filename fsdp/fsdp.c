// fsdp.c: Fully Sharded Data Parallel by dim-0 slicing: rank r keeps slice r (dim 0 cut into N equal
// slices, padded with zero rows) of every tensor, its gradient and its AdamW state. Before a unit runs
// (forward, and again backward) an all-gather rebuilds its full tensors (--reshard-after-forward 0: kept
// from forward to backward); after its backward a reduce-scatter leaves each rank the averaged gradient of
// its slices (the head and wte stay gathered into their backward; wte's two gradients add up, reduced once).
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
#include <stdlib.h>

#include "kit/kit.h"
#include "fsdp/fsdp.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int reshard_after_forward;
    Resident resident;               // this rank's slice of every tensor (row_slice_numel), padding included
    TensorState *tensor_state;       // (num_tensors) each tensor's state: SHARDED, GATHERING, GATHERED, ... (kit/strategy.h)
    int prefetch;                    // units ahead whose gathers start before they run
    InFlight *gathers, *reduces;     // (num_units) each unit's all-gather, reduce-scatter in flight
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
    Wire wire;                       // how the collectives travel (kit/wire.h); comm is its sharding ranks
} State;

// Starts one all-gather of the unit's tensors neither here nor on its way. Copy-in: my slice of each.
static void start_gather(State *s, int unit, int direction) {
    const GPT2Layout *layout = &s->model->layout;
    InFlight *g = &s->gathers[unit];
    size_t pack = resident_unit_numel(&s->resident, layout, unit, s->tensor_state);
    wire_all_gather_open(&s->wire, g, unit, direction, pack, s->model->param_dtype);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!tensor_sharded(s->tensor_state[t])) continue;
        inflight_pack(g, resident_params(&s->resident, t), s->resident.flat.count[t]);
        s->tensor_state[t] = TENSOR_GATHERING;
    }
    wire_all_gather_start(&s->wire, g, direction);
}

// Waits for the unit's all-gather, if one is in flight. Copy-out: recv holds the pack of each rank of
// g->comm (all N, or hpZ's node), then the next's; its part r of tensor t goes to rows [r*k, (r+1)*k).
static void finish_gather(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->param_dtype;
    InFlight *g = &s->gathers[unit];
    size_t at = 0;
    if (!wire_all_gather_finish(&s->wire, g)) return;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERING) continue;
        size_t slice = s->resident.flat.count[t] * (size_t)(s->comm->world / g->comm->world);
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
    wire_unit_gathered(&s->wire, unit, direction, s->tensor_state);
}

// Frees the unit's gathered tensors that the pass in `direction` is done with (released_after).
static void release_unit(State *s, int unit, int direction) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERED || !released_after(layout, t, unit, direction)) continue;
        free_full_params(s->model, s->mem, t, s->comm->world);
        s->tensor_state[t] = wire_released(&s->wire, direction);  // SHARDED (or, kept in the node, POST_FORWARD)
    }
}

// Starts one reduce-scatter of the gradients the unit finishes. Copy-in: block r holds rank r's rows.
static void start_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    InFlight *r = &s->reduces[unit];
    size_t pack = resident_unit_numel(&s->resident, layout, unit, NULL), at = 0;
    if (pack > 0) inflight_open(r, s->mem, pack * s->comm->world, pack, dtype);
    for (int i = 0; pack > 0 && i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->resident.flat.count[t];
        for (int q = 0; q < s->comm->world; q++)
            device_copy_as(dtype_at(r->send, q * pack + at, dtype), dtype_at(s->model->grads[t], q * slice, dtype), slice,
                           dtype);
        inflight_run(r, slice);
        at += slice;
    }
    wire_reduce_scatter_start(&s->wire, r, unit, COMM_AVG);
}

// Waits for the unit's reduce-scatter. Copy-out: my slices add into my gradient; all free the full ones.
static void finish_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    InFlight *r = &s->reduces[unit];
    size_t at = 0;
    if (!wire_reduce_scatter_finish(&s->wire, r, unit)) return;
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

// Fetch the unit again, with full-size gradients to add into (zeroed, or an earlier micro-batch's).
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
}

// Unit by unit: fetch, let rank 0 copy what is at home in the unit, release.
static void gather_full_model(void *state, float *flat) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) {
        gather_unit(s, u, 0);
        if (s->wire.world->rank == 0) unit_params_to_host(s->model, u, flat);
        release_unit(s, u, 0);
    }
}

// Rank r keeps rows [r*k, (r+1)*k) of every tensor, less padding (r: in its shard group).
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    if (wire_whole_rows(&s->wire, t, rows)) return 1;
    int first, count = row_slice_real_rows(&s->model->layout.tensors[t], s->comm->world, s->comm->rank, &first);
    if (count == 0) return 0;
    *rows = resident_rows(&s->resident, t, first, count, wire_first_group(&s->wire));
    return 1;
}

// This rank's slices, padding (zero) included, its first group's the norm's; then the whole tensors.
static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    return resident_grad_spans(&s->resident, wire_first_group(&s->wire), spans);
}

// The EMA of the weights this rank keeps takes their place, or gives it back.
static void swap_ema(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // nothing gathered left to go stale
    resident_swap_ema(&s->resident);
}

static void destroy(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // what a forward-only pass kept
    resident_free(&s->resident, s->mem);
    wire_free(&s->wire);
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
    s->mem = ctx->mem;
    s->accum_mode = ctx->accum_mode;
    s->reshard_after_forward = options->reshard_after_forward;
    s->prefetch = strategy_prefetch(ctx, "fsdp", options->prefetch);
    s->gathers = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->reduces = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->tensor_state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState));  // all TENSOR_SHARDED
    s->comm = wire_init(&s->wire, ctx, "fsdp", &options->wire, NULL, s->tensor_state);  // but those kept whole
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++)
        count[t] = s->tensor_state[t] == TENSOR_REPLICATED ? 0 : row_slice_numel(&layout->tensors[t], s->comm->world);
    resident_init(&s->resident, ctx, count);
    wire_join_whole(&s->wire, &s->resident);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        // each rank makes its own rows; rows past the end (padding) stay zero
        int first, rows = row_slice_real_rows(&layout->tensors[t], s->comm->world, s->comm->rank, &first);
        if (rows > 0 && s->resident.flat.count[t] > 0)  // not a tensor kept whole
            resident_load_rows(&s->resident, layout, &ctx->source, t, first, rows);
    }
    return STRATEGY_TABLE("fsdp", s);
}
