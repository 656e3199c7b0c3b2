// single.c: the reference, with no strategy at all. One rank holds the whole
// model in llm.c's flat layout; the hooks do nothing; AdamW updates everything.
// Every strategy must train the same model as this one.
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "strategy.h"

typedef struct {
    GPT2 *model;
    MemAccount *mem;
    size_t num_params;
    float *params, *grads, *m, *v;  // (num_params) each, llm.c layout
    AdamWSpan *spans;               // (num_tensors)
} SingleState;

static void single_nothing(void *state, int unit) { (void)state; (void)unit; }
static void single_finish_grads(void *state) { (void)state; }

static void single_step(void *state, AdamWConfig config) {
    SingleState *s = state;
    for (int t = 0; t < s->model->layout.num_tensors; t++) adamw_step_span(&s->spans[t], config);
    memset(s->grads, 0, s->num_params * sizeof(float));
}

static void single_gather_full_model(void *state, float *flat) {
    SingleState *s = state;
    memcpy(flat, s->params, s->num_params * sizeof(float));
}

static int single_local_rows(void *state, int t, LocalRows *rows) {
    SingleState *s = state;
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    *rows = (LocalRows){0, tensor->rows, s->params + tensor->offset, s->m + tensor->offset,
                        s->v + tensor->offset, &s->spans[t].step, 1};
    return 1;
}

static void single_free(void *state) {
    SingleState *s = state;
    mem_free_floats(s->mem, MEM_PARAMS, s->params, s->num_params);
    mem_free_floats(s->mem, MEM_GRADS, s->grads, s->num_params);
    mem_free_floats(s->mem, MEM_OPTIM, s->m, s->num_params);
    mem_free_floats(s->mem, MEM_OPTIM, s->v, s->num_params);
    free(s->spans);
    free(s);
}

Strategy single_init(const StrategyContext *ctx) {
    if (ctx->comm->world != 1) fatal("train_single runs on one rank; use a strategy trainer for %d", ctx->comm->world);
    SingleState *s = xcalloc(1, sizeof *s);
    const GPT2Layout *layout = &ctx->model->layout;
    s->model = ctx->model;
    s->mem = ctx->mem;
    s->num_params = layout->num_params;
    s->params = mem_alloc_floats(s->mem, MEM_PARAMS, s->num_params);
    s->grads = mem_alloc_floats(s->mem, MEM_GRADS, s->num_params);
    s->m = mem_alloc_floats(s->mem, MEM_OPTIM, s->num_params);
    s->v = mem_alloc_floats(s->mem, MEM_OPTIM, s->num_params);
    s->spans = xcalloc((size_t)layout->num_tensors, sizeof(AdamWSpan));
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        param_source_rows(&ctx->source, layout, t, 0, tensor->rows, s->params + tensor->offset);
        s->spans[t] = (AdamWSpan){s->params + tensor->offset, s->grads + tensor->offset,
                                  s->m + tensor->offset, s->v + tensor->offset, tensor->numel, 0};
    }
    gpt2_point_into_flat(layout, s->params, ctx->model->params);
    gpt2_point_into_flat(layout, s->grads, ctx->model->grads);
    return (Strategy){
        .name = "single", .state = s,
        .before_forward = single_nothing, .after_forward = single_nothing,
        .before_backward = single_nothing, .after_backward = single_nothing,
        .finish_grads = single_finish_grads, .step = single_step,
        .gather_full_model = single_gather_full_model, .local_rows = single_local_rows,
        .free = single_free,
    };
}
