// single.c: the reference, with no strategy at all. One rank holds the whole
// model; the hooks do nothing; AdamW updates everything. Every strategy must
// train the same model as this one.
#include <stdlib.h>

#include "device.h"
#include "util/errors.h"
#include "resident.h"

typedef struct {
    GPT2 *model;
    MemAccount *mem;
    Resident resident;  // every tensor whole
} State;

static void before_forward(void *state, int unit) { (void)state; (void)unit; }
static void after_forward(void *state, int unit) { (void)state; (void)unit; }
static void before_backward(void *state, int unit) { (void)state; (void)unit; }
// The unit's gradients are final once its last backward is done (wte's after
// unit 0): an offloaded optimizer may begin its update.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch) resident_unit_final(&s->resident, unit);
}
static void finish_grads(void *state) { (void)state; }

static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

static void gather_full_model(void *state, float *flat) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int t = 0; t < layout->num_tensors; t++)
        device_to_host_widened(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel,
                               s->model->param_dtype);
}

static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    *rows = resident_rows(&s->resident, t, 0, s->model->layout.tensors[t].rows, 1);
    return 1;
}

static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    spans[0] = resident_grad_span(&s->resident, 1);
    return 1;
}

// The EMA of the weights this rank keeps takes their place, or gives it back.
static void swap_ema(void *state) {
    State *s = state;
    resident_swap_ema(&s->resident);
}

static void destroy(void *state) {
    State *s = state;
    resident_free(&s->resident, s->mem);
    free(s);
}

Strategy single_init(const StrategyContext *ctx) {
    if (ctx->comm->world != 1) fatal("train_single runs on one rank; use a strategy trainer for %d", ctx->comm->world);
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->mem = ctx->mem;
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = layout->tensors[t].numel;
    resident_init(&s->resident, model, count, s->mem);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = resident_params(&s->resident, t);
        model->grads[t] = resident_grads(&s->resident, t);
    }
    return STRATEGY_TABLE("single", s);
}
