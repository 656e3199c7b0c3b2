// zero3.c: ZeRO stage 3 by tensor ownership. Each parameter tensor (layer 3's
// qkvw is one tensor) is owned whole by one rank, chosen to balance bytes
// (common/partition.c). Only the owner keeps it, its gradient and its AdamW
// state between uses. Before a unit runs (forward, and again backward) each of
// its tensors is broadcast from its owner into a temporary full buffer, freed
// right after; after the unit's backward each gradient is averaged onto its
// owner by a reduce. Each rank steps only the tensors it owns.
//
//   owner of h0.qkvw --broadcast--> everyone      (before forward / backward)
//   everyone --reduce(avg)--> owner of h0.qkvw    (after backward)
//
//   rank 0: [ wte      | h1.fcw ...  ]  owned tensors, whole
//   rank 1: [ h0.qkvw  | h0.fcw ...  ]  (sizes differ: ownership is lumpy)
//
// Per rank: 16 bytes per owned parameter; the largest tensor (wte) makes the
// balance uneven at small N. Per step: two broadcasts and one reduce of every
// tensor, plus one broadcast and one reduce of wte for its second use (the head).
// With K micro-batches, the broadcasts happen K times, and so do the reduces
// (sync-each), or they happen once while 4P bytes of full gradients wait (no-sync).
// DeepSpeed's production ZeRO-3 instead flattens and slices every tensor across
// all ranks (like fsdp/ here); ownership is easier to follow and shows the
// imbalance that slicing avoids.
#include <stdlib.h>

#include "../common/device.h"
#include "../common/util/errors.h"
#include "../common/resident.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int *owner;                      // (num_tensors) the rank that holds tensor t
    Resident resident;               // the tensors this rank owns, whole
    TensorState *tensor_state;       // (num_tensors) GATHERED while every rank has tensor t whole
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
} State;

static int owns(const State *s, int t) { return s->owner[t] == s->comm->rank; }

// How unevenly whole tensors split: the fullest rank against the mean.
static void report_balance(const State *s, const StrategyContext *ctx) {
    const GPT2Layout *layout = &s->model->layout;
    int world = s->comm->world;
    if (world == 1) return;
    size_t largest = 0;
    for (int r = 0; r < world; r++) {
        size_t bytes = zero3_owned_bytes(layout, s->owner, r);
        if (bytes > largest) largest = bytes;
    }
    double mean = (double)layout->num_params * sizeof(float) / world;
    strategy_note(ctx, "zero3: the fullest of %d ranks owns %.2f MB of parameters, %.1f%% above the mean %.2f MB\n",
                  world, largest / 1e6, 100.0 * (largest / mean - 1.0), mean / 1e6);
}

// Broadcast every tensor of the unit from its owner. The owner sends straight
// from its resident copy; everyone else receives into a temporary buffer.
static void gather_unit(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] == TENSOR_GATHERED) continue;
        if (!owns(s, t)) s->model->params[t] = device_alloc(s->mem, MEM_PARAMS_GATHERED, layout->tensors[t].numel);
        comm_broadcast(s->comm, s->model->params[t], layout->tensors[t].numel, s->owner[t]);
        s->tensor_state[t] = TENSOR_GATHERED;
    }
}

static void release_unit(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] == TENSOR_SHARDED) continue;
        if (!owns(s, t)) {
            device_free(s->mem, MEM_PARAMS_GATHERED, s->model->params[t], layout->tensors[t].numel);
            s->model->params[t] = NULL;
        }
        s->tensor_state[t] = TENSOR_SHARDED;
    }
}

// Average each gradient of the unit onto its owner, who adds it to its resident
// gradient (the tied wte arrives twice: from the head and from unit 0).
static void reduce_unit(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t numel = layout->tensors[t].numel;
        float *local = s->model->grads[t];
        comm_reduce(s->comm, local, owns(s, t) ? local : NULL, numel, s->owner[t], COMM_AVG);
        if (owns(s, t)) device_add(s->resident.grads + s->resident.flat.offset[t], local, numel);
        device_free(s->mem, MEM_GRADS_GATHERED, local, numel);
        s->model->grads[t] = NULL;
    }
}

static void before_forward(void *state, int unit) { gather_unit(state, unit); }
static void after_forward(void *state, int unit) { release_unit(state, unit); }

// Fetch the unit again, and give it zeroed full-size gradient buffers (or the
// ones an earlier micro-batch kept, without a reduce, to add into).
static void before_backward(void *state, int unit) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    gather_unit(s, unit);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->model->grads[t])
            s->model->grads[t] = device_alloc(s->mem, MEM_GRADS_GATHERED, layout->tensors[t].numel);
    }
}

// no_sync keeps every full gradient until the last micro-batch, then reduces once.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch || s->accum_mode == ACCUM_SYNC_EACH) reduce_unit(s, unit);
    release_unit(s, unit);
}

// The reduces above are blocking: nothing is left in flight.
static void finish_grads(void *state) { (void)state; }

static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

// Unit by unit: fetch, let rank 0 copy what is at home in the unit, release.
static void gather_full_model(void *state, float *flat) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int u = 0; u < layout->num_units; u++) {
        gather_unit(s, u);
        for (int t = 0; t < layout->num_tensors; t++)
            if (s->comm->rank == 0 && layout->tensors[t].home_unit == u)
                device_to_host(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel);
        release_unit(s, u);
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
static int local_grads(void *state, float **grads, size_t *count) {
    State *s = state;
    *grads = s->resident.grads;
    *count = s->resident.flat.total;
    return 1;
}

static void destroy(void *state) {
    State *s = state;
    resident_free(&s->resident, s->mem);
    free(s->owner);
    free(s->tensor_state);
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
    zero3_partition(layout, s->comm->world, s->owner);
    report_balance(s, ctx);
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = owns(s, t) ? layout->tensors[t].numel : 0;
    resident_init(&s->resident, layout, count, s->mem);
    free(count);
    s->tensor_state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState));  // all TENSOR_SHARDED
    for (int t = 0; t < layout->num_tensors; t++) {
        if (!owns(s, t)) continue;
        // each owner makes its own tensors: no initial communication
        resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = s->resident.params + s->resident.flat.offset[t];
    }
    return STRATEGY_TABLE("zero3", s);
}
