#include "resident.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "util/errors.h"

void resident_init(Resident *r, const GPT2Layout *layout, const size_t *count, MemAccount *mem) {
    flat_layout_init(&r->flat, layout, count);
    r->params = device_alloc(mem, MEM_PARAMS, r->flat.total);
    r->grads = device_alloc(mem, MEM_GRADS, r->flat.total);
    r->m = device_alloc(mem, MEM_OPTIM, r->flat.total);
    r->v = device_alloc(mem, MEM_OPTIM, r->flat.total);
    r->spans = xcalloc((size_t)layout->num_tensors, sizeof(AdamWSpan));
    for (int t = 0; t < layout->num_tensors; t++) {
        size_t off = r->flat.offset[t];
        r->spans[t] = (AdamWSpan){r->params + off, r->grads + off, r->m + off, r->v + off, r->flat.count[t], 0};
    }
}

void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count) {
    size_t n = (size_t)row_count * layout->tensors[t].cols;
    float *host = xmalloc(n * sizeof(float));  // the source is on the host; the part may be on a GPU
    param_source_rows(src, layout, t, row_begin, row_count, host);
    device_from_host(r->params + r->flat.offset[t], host, n);
    free(host);
}

void resident_step(Resident *r, int num_tensors, AdamWConfig config) {
    for (int t = 0; t < num_tensors; t++)
        if (r->spans[t].count > 0) device_adamw(&r->spans[t], config);
    device_zero(r->grads, r->flat.total);
}

LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes) {
    size_t off = r->flat.offset[t];
    return (LocalRows){row_begin, row_count, r->params + off, r->m + off, r->v + off, &r->spans[t].step, writes};
}

void resident_free(Resident *r, MemAccount *mem) {
    device_free(mem, MEM_PARAMS, r->params, r->flat.total);
    device_free(mem, MEM_GRADS, r->grads, r->flat.total);
    device_free(mem, MEM_OPTIM, r->m, r->flat.total);
    device_free(mem, MEM_OPTIM, r->v, r->flat.total);
    flat_layout_free(&r->flat);
    free(r->spans);
    memset(r, 0, sizeof *r);
}
