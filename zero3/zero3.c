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
// DeepSpeed's production ZeRO-3 instead flattens and slices every tensor across
// all ranks (like fsdp/ here); ownership is easier to follow and shows the
// imbalance that slicing avoids.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/device.h"
#include "../common/errors.h"
#include "../common/resident.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int *owner;                      // (num_tensors) the rank that holds tensor t
    Resident resident;               // the tensors this rank owns, whole
    int *gathered;                   // (num_tensors) 1 while model->params[t] is usable
} Zero3State;

static void zero3_before_forward(void *state, int unit);
static void zero3_after_forward(void *state, int unit);
static void zero3_before_backward(void *state, int unit);
static void zero3_after_backward(void *state, int unit);
static void zero3_finish_grads(void *state);
static void zero3_step(void *state, AdamWConfig config);
static void zero3_gather_full_model(void *state, float *flat);
static int zero3_local_rows(void *state, int t, LocalRows *rows);
static void zero3_free(void *state);

static int owns(const Zero3State *s, int t) { return s->owner[t] == s->comm->rank; }

// Rank 0 says how unevenly whole tensors split: the fullest rank against the mean.
static void zero3_report_balance(const Zero3State *s) {
    const GPT2Layout *layout = &s->model->layout;
    int world = s->comm->world;
    if (s->comm->rank != 0 || world == 1) return;
    size_t largest = 0;
    for (int r = 0; r < world; r++) {
        size_t bytes = zero3_owned_bytes(layout, s->owner, r);
        if (bytes > largest) largest = bytes;
    }
    double mean = (double)layout->num_params * sizeof(float) / world;
    printf("zero3: the fullest of %d ranks owns %.2f MB of parameters, %.1f%% above the mean %.2f MB\n", world,
           largest / 1e6, 100.0 * (largest / mean - 1.0), mean / 1e6);
}

// Broadcast every tensor of the unit from its owner. The owner sends straight
// from its resident copy; everyone else receives into a temporary buffer.
static void zero3_gather_unit(Zero3State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->gathered[t]) continue;
        if (!owns(s, t)) s->model->params[t] = device_alloc(s->mem, MEM_PARAMS_GATHERED, layout->tensors[t].numel);
        comm_broadcast(s->comm, s->model->params[t], layout->tensors[t].numel, s->owner[t]);
        s->gathered[t] = 1;
    }
}

static void zero3_release_unit(Zero3State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->gathered[t]) continue;
        if (!owns(s, t)) {
            device_free(s->mem, MEM_PARAMS_GATHERED, s->model->params[t], layout->tensors[t].numel);
            s->model->params[t] = NULL;
        }
        s->gathered[t] = 0;
    }
}

// Average each gradient of the unit onto its owner, who adds it to its resident
// gradient (the tied wte arrives twice: from the head and from unit 0).
static void zero3_reduce_unit(Zero3State *s, int unit) {
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

Strategy zero3_init(const StrategyContext *ctx) {
    Zero3State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->comm = ctx->comm;
    s->mem = ctx->mem;
    s->owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    zero3_partition(layout, s->comm->world, s->owner);
    zero3_report_balance(s);
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = owns(s, t) ? layout->tensors[t].numel : 0;
    resident_init(&s->resident, layout, count, s->mem);
    free(count);
    s->gathered = xcalloc((size_t)layout->num_tensors, sizeof(int));
    for (int t = 0; t < layout->num_tensors; t++) {
        if (!owns(s, t)) continue;
        // each owner makes its own tensors: no initial communication
        resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = s->resident.params + s->resident.flat.offset[t];
    }
    return (Strategy){
        .name = "zero3", .state = s,
        .before_forward = zero3_before_forward, .after_forward = zero3_after_forward,
        .before_backward = zero3_before_backward, .after_backward = zero3_after_backward,
        .finish_grads = zero3_finish_grads, .step = zero3_step,
        .gather_full_model = zero3_gather_full_model, .local_rows = zero3_local_rows,
        .free = zero3_free,
    };
}

static void zero3_before_forward(void *state, int unit) { zero3_gather_unit(state, unit); }
static void zero3_after_forward(void *state, int unit) { zero3_release_unit(state, unit); }

// Fetch the unit again, and give it zeroed full-size gradient buffers.
static void zero3_before_backward(void *state, int unit) {
    Zero3State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    zero3_gather_unit(s, unit);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        s->model->grads[t] = device_alloc(s->mem, MEM_GRADS_GATHERED, layout->tensors[t].numel);
    }
}

static void zero3_after_backward(void *state, int unit) {
    zero3_reduce_unit(state, unit);
    zero3_release_unit(state, unit);
}

// The reduces above are blocking: nothing is left in flight.
static void zero3_finish_grads(void *state) { (void)state; }

static void zero3_step(void *state, AdamWConfig config) {
    Zero3State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

// Unit by unit: fetch, let rank 0 copy what is at home in the unit, release.
static void zero3_gather_full_model(void *state, float *flat) {
    Zero3State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int u = 0; u < layout->num_units; u++) {
        zero3_gather_unit(s, u);
        for (int t = 0; t < layout->num_tensors; t++)
            if (s->comm->rank == 0 && layout->tensors[t].home_unit == u)
                device_to_host(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel);
        zero3_release_unit(s, u);
    }
}

// The owner keeps all rows of its tensors; other ranks keep none.
static int zero3_local_rows(void *state, int t, LocalRows *rows) {
    Zero3State *s = state;
    if (!owns(s, t)) return 0;
    *rows = resident_rows(&s->resident, t, 0, s->model->layout.tensors[t].rows, 1);
    return 1;
}

static void zero3_free(void *state) {
    Zero3State *s = state;
    resident_free(&s->resident, s->mem);
    free(s->owner);
    free(s->gathered);
    free(s);
}
