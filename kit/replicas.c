// replicas.c: FSDP's whole tensors (replicas.h).
#include "kit/replicas.h"

#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

void replicas_init(Replicas *r, const StrategyContext *ctx, uint64_t min_numel, TensorState *states) {
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    memset(r, 0, sizeof *r);
    r->model = model;
    r->comm = ctx->comm;
    r->mem = ctx->mem;
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].numel < min_numel) {
            states[t] = TENSOR_REPLICATED;
            count[t] = layout->tensors[t].numel;
        }
    resident_init(&r->resident, ctx, count);
    for (int t = 0; t < layout->num_tensors; t++) {
        if (states[t] != TENSOR_REPLICATED) continue;
        // every rank makes the whole tensor (no communication), and the model reads and writes it there
        resident_load_rows(&r->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = resident_params(&r->resident, t);
        model->grads[t] = resident_grads(&r->resident, t);
    }
    free(count);
}

void replicas_join(Replicas *r, Resident *part) { resident_add_whole(part, &r->resident, r->comm->rank == 0); }

int replicas_rows(Replicas *r, int t, LocalRows *rows) {
    if (r->resident.flat.count[t] == 0) return 0;
    *rows = resident_rows(&r->resident, t, 0, r->model->layout.tensors[t].rows, r->comm->rank == 0);
    return 1;
}

void replicas_free(Replicas *r) {
    resident_free(&r->resident, r->mem);
    memset(r, 0, sizeof *r);
}
