// zero3.c: ZeRO stage 3 by tensor ownership. Each parameter tensor (layer 3's qkvw is
// one) is owned whole by one rank, chosen to balance bytes (kit/partition.c), which alone
// keeps it, its gradient and AdamW state. Before a unit runs (forward, and again backward)
// each of its tensors is broadcast from its owner into a temporary full buffer; after its
// backward each gradient is averaged onto its owner by a reduce (the head and wte,
// broadcast once, stay into their backward; wte's two gradients add up, reduced once).
//
//   owner of h0.qkvw --broadcast--> everyone      (before forward / backward)
//   everyone --reduce(avg)--> owner of h0.qkvw    (after backward)
//   rank 0: [ wte | h1.fcw ... ]  rank 1: [ h0.qkvw | h0.fcw ... ]  (whole, lumpy)
// Per rank: 16 bytes per owned parameter; the largest tensor (wte) makes the balance
// uneven at small N. Per step: broadcasts of 2P - P_h (P_h: the head's, wte included)
// and one reduce of every tensor.
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master joins the AdamW state: 2 + 2 + 12 bytes per parameter, and half
// the bytes on the wire.
#include <stdlib.h>

#include "kit/kit.h"
#include "zero3/zero3.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int *owner;                      // (num_tensors) the rank that holds tensor t
    Resident resident;               // the tensors this rank owns, whole
    TensorState *tensor_state;       // (num_tensors) each tensor's state: SHARDED, GATHERING, GATHERED, ... (kit/strategy.h)
    int prefetch;                    // units ahead whose gathers start before they run
    CommHandle *gathers, *reduces;   // (num_tensors) tensor t's broadcast, gradient reduce in flight
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
    Wire wire;                       // how the collectives travel (kit/wire.h)
} State;

static int owns(const State *s, int t) { return s->owner[t] == s->comm->rank; }

// Starts broadcasting every tensor of the unit neither here nor on its way, from its owner's copy.
static void start_gather(State *s, int unit, int direction) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!tensor_sharded(s->tensor_state[t])) continue;
        if (!owns(s, t)) alloc_full_params(s->model, s->mem, t, 1);
        s->gathers[t] = wire_broadcast_start(&s->wire, unit, t, direction, s->owner[t]);
        s->tensor_state[t] = TENSOR_GATHERING;
    }
}

// Waits for the unit's broadcasts still in flight.
static void finish_gather(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERING) continue;
        wire_broadcast_finish(&s->wire, &s->gathers[t], t);
        s->tensor_state[t] = TENSOR_GATHERED;
    }
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
        if (!owns(s, t) || s->model->params[t] != resident_params(&s->resident, t)) free_full_params(s->model, s->mem, t, 1);
        if (owns(s, t)) s->model->params[t] = resident_params(&s->resident, t);  // a copy the wire made, freed
        s->tensor_state[t] = wire_released(&s->wire, direction);  // SHARDED (or, kept in the node, POST_FORWARD)
    }
}

// Starts averaging each gradient the unit finishes (those at home in it) onto its owner: a reduce.
static void start_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        s->reduces[t] = wire_reduce_start(&s->wire, t, s->owner[t], COMM_AVG);
    }
}

// Waits for the unit's reduces; each owner adds the average to its gradient, all free the full ones.
static void finish_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!wire_reduce_finish(&s->wire, &s->reduces[t], t)) continue;
        if (owns(s, t))
            device_add_as(resident_grads(&s->resident, t), s->model->grads[t], layout->tensors[t].numel, s->model->grad_dtype);
        free_full_grads(s->model, s->mem, t, 1);
    }
    resident_unit_final(&s->resident, unit);
}

static void before_forward(void *state, int unit) { gather_unit(state, unit, +1); }
static void after_forward(void *state, int unit, int backward_follows) {
    State *s = state;
    release_unit(s, unit, backward_follows ? +1 : 0);
}

// Fetch the unit again, with full-size gradients to add into (zeroed, or an earlier micro-batch's).
static void before_backward(void *state, int unit) {
    State *s = state;
    gather_unit(s, unit, -1);
    alloc_unit_grads(s->model, s->mem, unit, 1);
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
        if (s->comm->rank == 0) unit_params_to_host(s->model, u, flat);
        release_unit(s, u, 0);
    }
}

// The owner keeps all rows of its tensors; other ranks keep none.
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    if (!owns(s, t)) return 0;
    *rows = resident_rows(&s->resident, t, 0, s->model->layout.tensors[t].rows, 1);
    return 1;
}

// The owned tensors' gradients (nothing on a rank that owns none).
static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    return resident_grad_spans(&s->resident, 1, spans);
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
    free(s->owner);
    free(s->tensor_state);
    free(s->gathers);
    free(s->reduces);
    free(s);
}

Strategy zero3_init(const StrategyContext *ctx) {
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->comm = ctx->comm;
    s->mem = ctx->mem;
    s->accum_mode = ctx->accum_mode;
    s->owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    whole_tensor_owners(layout, s->comm->world, s->owner);
    note_owner_balance(ctx, "zero3", s->owner);
    const Zero3Options *options = ctx->options;
    s->prefetch = strategy_prefetch(ctx, "zero3", options->prefetch);
    s->tensor_state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState));  // all TENSOR_SHARDED
    wire_init(&s->wire, ctx, "zero3", &options->wire, s->owner, s->tensor_state);
    s->gathers = xcalloc((size_t)layout->num_tensors, sizeof(CommHandle));
    s->reduces = xcalloc((size_t)layout->num_tensors, sizeof(CommHandle));
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = owns(s, t) ? layout->tensors[t].numel : 0;
    resident_init(&s->resident, ctx, count);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        if (owns(s, t)) resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        // each owner makes its own tensors (no initial communication), and the model reads them there
        if (owns(s, t)) model->params[t] = resident_params(&s->resident, t);
    }
    return STRATEGY_TABLE("zero3", s);
}
