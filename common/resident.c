#include "resident.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "util/errors.h"

void *resident_params(const Resident *r, int t) { return dtype_at(r->params, r->flat.offset[t], r->param_dtype); }
void *resident_grads(const Resident *r, int t) { return dtype_at(r->grads, r->flat.offset[t], r->grad_dtype); }

void resident_init(Resident *r, const GPT2 *model, const size_t *count, MemAccount *mem) {
    const GPT2Layout *layout = &model->layout;
    flat_layout_init(&r->flat, layout, count);
    r->param_dtype = model->param_dtype;
    r->grad_dtype = model->grad_dtype;
    size_t total = r->flat.total;
    r->params = device_alloc_as(mem, MEM_PARAMS, total, r->param_dtype);
    r->grads = device_alloc_as(mem, MEM_GRADS, total, r->grad_dtype);
    // the master copy is optimizer state, as in the ZeRO paper's 2 + 2 + 12 bytes
    r->master = r->param_dtype == DTYPE_BF16 ? device_alloc(mem, MEM_OPTIM, total) : NULL;
    r->m = device_alloc(mem, MEM_OPTIM, total);
    r->v = device_alloc(mem, MEM_OPTIM, total);
    r->spans = xcalloc((size_t)layout->num_tensors, sizeof(AdamWSpan));
    for (int t = 0; t < layout->num_tensors; t++) {
        size_t off = r->flat.offset[t];
        float *values = r->master ? r->master + off : resident_params(r, t);
        bf16 *working = r->master ? resident_params(r, t) : NULL;
        r->spans[t] = adamw_span(values, resident_grads(r, t), r->grad_dtype, r->m + off, r->v + off, working,
                                 r->flat.count[t]);
    }
}

void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count) {
    size_t n = (size_t)row_count * layout->tensors[t].cols;
    float *host = xmalloc(n * sizeof(float));  // the source is on the host; the part may be on a GPU
    param_source_rows(src, layout, t, row_begin, row_count, host);
    if (r->master) device_from_host(r->master + r->flat.offset[t], host, n);
    device_from_host_rounded(resident_params(r, t), host, n, r->param_dtype);
    free(host);
}

void resident_broadcast(Resident *r, Comm *comm, int root) {
    if (!r->master) {
        comm_broadcast(comm, r->params, r->flat.total, DTYPE_FP32, root);
        return;
    }
    comm_broadcast(comm, r->master, r->flat.total, DTYPE_FP32, root);
    device_round(r->params, r->master, r->flat.total);
}

void resident_step(Resident *r, int num_tensors, AdamWConfig config) {
    for (int t = 0; t < num_tensors; t++)
        if (r->spans[t].count > 0) device_adamw(&r->spans[t], config);
    device_zero_as(r->grads, r->flat.total, r->grad_dtype);
}

LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes) {
    size_t off = r->flat.offset[t];
    return (LocalRows){row_begin, row_count, r->spans[t].params, r->m + off, r->v + off, &r->spans[t].step, writes,
                       r->spans[t].working};
}

void resident_free(Resident *r, MemAccount *mem) {
    device_free_as(mem, MEM_PARAMS, r->params, r->flat.total, r->param_dtype);
    device_free_as(mem, MEM_GRADS, r->grads, r->flat.total, r->grad_dtype);
    if (r->master) device_free(mem, MEM_OPTIM, r->master, r->flat.total);
    device_free(mem, MEM_OPTIM, r->m, r->flat.total);
    device_free(mem, MEM_OPTIM, r->v, r->flat.total);
    flat_layout_free(&r->flat);
    free(r->spans);
    memset(r, 0, sizeof *r);
}
