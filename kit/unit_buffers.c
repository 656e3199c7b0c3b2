#include "kit/unit_buffers.h"

#include <stdlib.h>

#include "device/device.h"
#include "kit/partition.h"
#include "util/errors.h"

static size_t full_numel(const GPT2 *model, int t, int rows_multiple) {
    return row_slice_padded_numel(&model->layout.tensors[t], rows_multiple);
}

void alloc_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    model->params[t] = device_alloc_overwritten_as(mem, MEM_PARAMS_GATHERED, full_numel(model, t, rows_multiple),
                                                   model->param_dtype);  // the gather fills every row
}

void free_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    device_free_as(mem, MEM_PARAMS_GATHERED, model->params[t], full_numel(model, t, rows_multiple), model->param_dtype);
    model->params[t] = NULL;
}

void alloc_unit_grads(GPT2 *model, MemAccount *mem, int unit, int rows_multiple) {
    const GPT2Layout *layout = &model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!model->grads[t])
            model->grads[t] = device_alloc_as(mem, MEM_GRADS_GATHERED, full_numel(model, t, rows_multiple),
                                              model->grad_dtype);
    }
}

void free_full_grads(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    device_free_as(mem, MEM_GRADS_GATHERED, model->grads[t], full_numel(model, t, rows_multiple), model->grad_dtype);
    model->grads[t] = NULL;
}

void inflight_open(InFlight *f, MemAccount *mem, size_t send_numel, size_t recv_numel, DType dtype) {
    CHECK(!f->send, "a collective started on a unit's buffers while the last one on them (%s) is open: wait for it "
          "and close its buffers (inflight_close), in the unit's finish_gather or finish_reduce, first",
          f->handle.active ? comm_op_names[f->handle.op] : "already waited for, not closed");
    f->send_numel = send_numel;
    f->recv_numel = recv_numel;
    f->dtype = dtype;
    f->send = device_alloc_overwritten_as(mem, MEM_COMM_BUFFERS, send_numel, dtype);  // packed whole
    f->recv = device_alloc_overwritten_as(mem, MEM_COMM_BUFFERS, recv_numel, dtype);  // the collective's output
    f->packed = 0;
    f->num_runs = 0;
    f->filled = 0;
    f->comm = NULL;  // set by the wire's start
    f->leg = NULL;
}

void inflight_run(InFlight *f, size_t count) {
    f->runs = xrealloc(f->runs, (size_t)(f->num_runs + 1) * sizeof *f->runs);
    f->runs[f->num_runs++] = count;
    f->packed += count;
}

void inflight_pack(InFlight *f, const void *src, size_t count) {
    if (f->filled) return;
    CHECK(f->packed + count <= f->send_numel, "packing %zu elements after %zu into a send buffer of %zu", count,
          f->packed, f->send_numel);
    device_copy_as(dtype_at(f->send, f->packed, f->dtype), src, count, f->dtype);
    inflight_run(f, count);
}

void inflight_close(InFlight *f, MemAccount *mem) {
    device_free_as(mem, MEM_COMM_BUFFERS, f->send, f->send_numel, f->dtype);
    device_free_as(mem, MEM_COMM_BUFFERS, f->recv, f->recv_numel, f->dtype);
    if (f->leg) f->close_leg(f->leg, mem);
    f->leg = NULL;
    f->send = f->recv = NULL;
    free(f->runs);
    f->runs = NULL;
    f->num_runs = 0;
}

int released_after(const GPT2Layout *layout, int t, int unit, int direction) {
    const GPT2Tensor *tensor = &layout->tensors[t];
    if (direction > 0) return tensor->last_unit == unit && unit + 1 < layout->num_units;
    if (direction < 0) return tensor->home_unit == unit;
    return 1;
}

int units_ahead(const GPT2Layout *layout, int unit, int direction, int prefetch) {
    int ahead = 0;
    while (direction != 0 && ahead < prefetch && unit + direction * (ahead + 1) >= 0 &&
           unit + direction * (ahead + 1) < layout->num_units)
        ahead++;
    return ahead;
}

void unit_params_to_host(const GPT2 *model, int unit, float *flat) {
    const GPT2Layout *layout = &model->layout;
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].home_unit == unit)
            device_to_host_widened(flat + layout->tensors[t].offset, model->params[t], layout->tensors[t].numel,
                                   model->param_dtype);
}
