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
    r->reduces = xcalloc((size_t)layout->num_units, sizeof(CommHandle));
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].numel < min_numel) {
            states[t] = TENSOR_REPLICATED;
            count[t] = layout->tensors[t].numel;
        }
    resident_init(&r->resident, model, count, r->mem);
    for (int t = 0; t < layout->num_tensors; t++) {
        if (states[t] != TENSOR_REPLICATED) continue;
        // every rank makes the whole tensor (no communication), and the model reads and writes it there
        resident_load_rows(&r->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = resident_params(&r->resident, t);
        model->grads[t] = resident_grads(&r->resident, t);
    }
    free(count);
}

size_t replicas_slice_numel(const Replicas *r, int t, size_t slice) {
    return r->resident.flat.count[t] > 0 ? 0 : slice;
}

void replicas_start_reduce(Replicas *r, int unit) {
    size_t count;
    void *bucket = resident_unit_grads(&r->resident, unit, &count);
    if (count > 0) r->reduces[unit] = comm_all_reduce_start(r->comm, bucket, count, r->model->grad_dtype, COMM_AVG);
}

void replicas_finish_reduce(Replicas *r, int unit) {
    comm_wait(r->comm, &r->reduces[unit]);
    resident_unit_final(&r->resident, unit);
}

void replicas_step(Replicas *r, AdamWConfig config) {
    resident_step(&r->resident, r->model->layout.num_tensors, config);
}

int replicas_rows(Replicas *r, int t, LocalRows *rows) {
    if (r->resident.flat.count[t] == 0) return 0;
    *rows = resident_rows(&r->resident, t, 0, r->model->layout.tensors[t].rows, r->comm->rank == 0);
    return 1;
}

int replicas_grad_span(const Replicas *r, GradSpan *span) {
    *span = resident_grad_span(&r->resident, r->comm->rank == 0);
    return 1;
}

void replicas_swap_ema(Replicas *r) { resident_swap_ema(&r->resident); }

void replicas_free(Replicas *r) {
    resident_free(&r->resident, r->mem);
    free(r->reduces);
    memset(r, 0, sizeof *r);
}
