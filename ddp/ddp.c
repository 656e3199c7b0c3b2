// ddp.c: Distributed Data Parallel. Every rank holds the whole model, its
// gradients and its AdamW state; ranks differ only in the slice of the batch
// they run. After each unit's backward, that unit's gradients (one bucket) are
// averaged over ranks by a non-blocking all-reduce that overlaps the backward of
// the units below it; all buckets are waited for before the optimizer step,
// which every rank then runs identically on the full model.
//
//   rank 0: [ params | grads | m v ]  full      backward u3 -> all-reduce(u3) ~~~~~~~>
//   rank 1: [ params | grads | m v ]  full            backward u2 -> all-reduce(u2) ~~~>
//                                                           ... finish_grads: wait all
// Per rank: 16 bytes per parameter (4 params + 4 grads + 8 AdamW).
// Per step: one all-reduce of P, i.e. 2 (N-1)/N * 4P bytes sent per rank, whatever
// the number of micro-batches (the gradients accumulate in place until the last).
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master joins the AdamW state: 2 + 2 + 12 bytes per parameter, and half
// the bytes on the wire.
#include <stdlib.h>

#include "kit/kit.h"
#include "ddp/ddp.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    Resident resident;               // every tensor whole: the full replica
    CommHandle *reduces;             // (num_units) each unit's gradient all-reduce in flight
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
} State;

// The unit's parameters, whole, now: resident for good, nothing to fetch.
static void gather_unit(State *s, int unit, int direction) {
    (void)s, (void)unit, (void)direction;
}

static void release_unit(State *s, int unit, int direction) {
    (void)s, (void)unit, (void)direction;  // nothing to release either
}

// Starts averaging the unit's bucket (its gradients, side by side) over all ranks.
static void start_reduce(State *s, int unit) {
    size_t count;
    void *bucket = resident_unit_grads(&s->resident, unit, &count);
    if (count > 0) s->reduces[unit] = comm_all_reduce_start(s->comm, bucket, count, s->model->grad_dtype, COMM_AVG);
}

// Waits for the unit's bucket, if it is in flight: its average is final.
static void finish_reduce(State *s, int unit) {
    comm_wait(s->comm, &s->reduces[unit]);
    resident_unit_final(&s->resident, unit);
}

static void before_forward(void *state, int unit) { gather_unit(state, unit, +1); }
static void after_forward(void *state, int unit, int backward_follows) {
    State *s = state;
    release_unit(s, unit, backward_follows ? +1 : 0);
}

// Fetch the unit again (here for good); its gradients are the replica's own.
static void before_backward(void *state, int unit) {
    State *s = state;
    gather_unit(s, unit, -1);
}

// The unit's gradients are final after its backward (the tied wte's after unit 0): start averaging them
// under the units below, nudging those in flight. Earlier micro-batches only add in: one all-reduce of their sum.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch || s->accum_mode == ACCUM_SYNC_EACH) {
        start_reduce(s, unit);
        for (int u = unit + 1; u < s->model->layout.num_units; u++) comm_progress(s->comm, &s->reduces[u]);
    }
}

static void finish_grads(void *state) {
    State *s = state;
    for (int u = s->model->layout.num_units - 1; u >= 0; u--) finish_reduce(s, u);
}

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

// Every replica keeps every row; rank 0 alone writes them.
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    *rows = resident_rows(&s->resident, t, 0, s->model->layout.tensors[t].rows, s->comm->rank == 0);
    return 1;
}

// Every replica holds the whole averaged gradient: rank 0's counts, once.
static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    return resident_grad_spans(&s->resident, s->comm->rank == 0, spans);
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
    free(s->reduces);
    free(s);
}

Strategy ddp_init(const StrategyContext *ctx) {
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->comm = ctx->comm;
    s->mem = ctx->mem;
    s->accum_mode = ACCUM_NO_SYNC;  // the gradients are whole anyway: micro-batches add up in place
    s->reduces = xcalloc((size_t)layout->num_units, sizeof(CommHandle));
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = layout->tensors[t].numel;
    resident_init(&s->resident, ctx, count);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        if (s->comm->rank == 0) resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        // the model reads and writes the replica directly, for good
        model->params[t] = resident_params(&s->resident, t);
        model->grads[t] = resident_grads(&s->resident, t);
    }
    // replicas must start identical: rank 0's copy wins
    resident_broadcast(&s->resident, s->comm, 0);
    return STRATEGY_TABLE("ddp", s);
}
