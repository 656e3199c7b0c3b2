#include "kit/resident.h"

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "comm/sim_clock.h"
#include "util/errors.h"
#include "util/timer.h"

// A range keeps the whole replica's parameters (and ZeRO-1's whole gradients) in llm.c's flat order.
void *resident_params(const Resident *r, int t) {
    size_t at = r->range ? r->model->layout.tensors[t].offset : r->flat.offset[t];
    return dtype_at(r->params, at, r->param_dtype);
}

void *resident_grads(const Resident *r, int t) {
    if (r->range) return r->whole_grads ? resident_grad_at(r, r->model->layout.tensors[t].offset) : NULL;
    return dtype_at(r->grads, r->flat.offset[t], r->grad_dtype);
}

void *resident_unit_grads(const Resident *r, int unit, size_t *count) {
    *count = r->flat.unit_end[unit] - r->flat.unit_begin[unit];
    return dtype_at(r->grads, r->flat.unit_begin[unit], r->grad_dtype);
}

size_t resident_unit_numel(const Resident *r, const GPT2Layout *layout, int unit, const TensorState *only) {
    size_t numel = 0;
    int count = only ? layout->unit_num_tensors[unit] : layout->unit_num_home_tensors[unit];
    for (int i = 0; i < count; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!only || tensor_sharded(only[t])) numel += r->flat.count[t];
    }
    return numel;
}

// The optimizer state's category: on the device, or offloaded to the host.
static MemCategory optim_category(const Resident *r) { return r->offload ? MEM_HOST_OPTIM : MEM_OPTIM; }

// Every array, in one order.
static void alloc_arrays(Resident *r, const StrategyContext *ctx, size_t params, size_t grads, size_t state) {
    static const RunSettings none = {0};
    const GPT2 *model = ctx->model;
    MemAccount *mem = ctx->mem;
    r->param_dtype = model->param_dtype;
    r->grad_dtype = model->grad_dtype;
    r->run = ctx->run ? ctx->run : &none;
    r->offload = r->run->offload_optimizer;
    r->model = model;
    r->params_numel = params, r->grads_numel = grads, r->state_numel = state;
    r->params = device_alloc_as(mem, MEM_PARAMS, params, r->param_dtype);
    r->grads = device_alloc_as(mem, MEM_GRADS, grads, r->grad_dtype);
    // the master copy is optimizer state, as in the ZeRO paper's 2 + 2 + 12 bytes;
    // offloaded, the CPU needs one in an fp32 run too (the params stay on the device)
    int master = r->param_dtype == DTYPE_BF16 || r->offload;
    r->master = master ? device_alloc(mem, optim_category(r), state) : NULL;
    r->m = device_alloc(mem, optim_category(r), state);
    r->v = device_alloc(mem, optim_category(r), state);
    if (r->offload) {
        r->host_grads = device_alloc_as(mem, MEM_HOST_STAGING, state, r->grad_dtype);
        if (r->param_dtype == DTYPE_BF16) r->host_working = device_alloc_as(mem, MEM_HOST_STAGING, state, DTYPE_BF16);
        r->device_grads = xcalloc((size_t)model->layout.num_tensors, sizeof(void *));
        r->device_params = xcalloc((size_t)model->layout.num_tensors, sizeof(void *));
        r->down_from = model->layout.num_units;  // every span on the device
        r->reduced_unit = -1;
    }
    r->ema_decay = r->run->ema_decay;
    r->ema = r->ema_decay > 0 ? device_alloc(mem, MEM_EMA, state) : NULL;
    r->spans = xcalloc((size_t)model->layout.num_tensors, sizeof(AdamWSpan));
    r->staged_tensor = -1;
    r->rows_tensor = -1;
    r->staging.cache.dry = mem->cache.dry;  // build/plan's dry run stages nothing real either
}

// Tensor t's AdamW span of `count` elements: its part of the state starts at
// `at`, its gradients and parameters on the device are `grads` and `params`.
// On the device AdamW updates the kept values in place (the master in a bf16 run,
// rounded into `params`); offloaded, the span is the host's master, moments and
// staging, and the device's buffers are where step() copies from and to.
static void init_span(Resident *r, int t, size_t at, void *grads, void *params, size_t count) {
    if (r->offload) {
        r->spans[t] = adamw_span(r->master + at, dtype_at(r->host_grads, at, r->grad_dtype), r->grad_dtype,
                                 r->m + at, r->v + at, r->host_working ? r->host_working + at : NULL, count);
        r->device_grads[t] = grads;
        r->device_params[t] = params;
        return;
    }
    float *values = r->master ? r->master + at : params;
    bf16 *working = r->master ? params : NULL;
    r->spans[t] = adamw_span(values, grads, r->grad_dtype, r->m + at, r->v + at, working, count);
}

void resident_init(Resident *r, const StrategyContext *ctx, const size_t *count) {
    const GPT2Layout *layout = &ctx->model->layout;
    memset(r, 0, sizeof *r);  // a Resident on the stack starts as garbage: no range, no offload
    flat_layout_init(&r->flat, layout, count);
    alloc_arrays(r, ctx, r->flat.total, r->flat.total, r->flat.total);
    for (int t = 0; t < layout->num_tensors; t++)
        init_span(r, t, r->flat.offset[t], resident_grads(r, t), resident_params(r, t), r->flat.count[t]);
}

void resident_init_range(Resident *r, const StrategyContext *ctx, int world, int rank, int whole_grads) {
    const GPT2Layout *layout = &ctx->model->layout;
    memset(r, 0, sizeof *r);
    size_t P = layout->num_params, hi;
    flat_range(P, world, rank, &r->lo, &hi);
    r->range = 1;
    r->whole_grads = whole_grads;
    alloc_arrays(r, ctx, (hi - r->lo) * (size_t)world, whole_grads ? P : hi - r->lo, hi - r->lo);
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        size_t begin, end, count = flat_range_overlap(P, world, rank, tensor->offset, tensor->numel, &begin, &end);
        if (count == 0) continue;
        // AdamW's view of the part: the replica's own elements, or in a bf16 run
        // the master's, rounded into the replica after each update
        init_span(r, t, begin - r->lo, resident_grad_at(r, begin), dtype_at(r->params, begin, r->param_dtype), count);
    }
}

// Where the kept fp32 values start: the master in a bf16 run, else the
// parameters themselves (a range's own part of the replica).
static float *kept_values(const Resident *r) {
    return r->master ? r->master : dtype_at(r->params, r->range ? r->lo : 0, DTYPE_FP32);
}

void *resident_grad_at(const Resident *r, size_t element) {
    return dtype_at(r->grads, r->whole_grads ? element : element - r->lo, r->grad_dtype);
}

// The checkpoint is done with the staged rows: this rank's part goes back (a
// load filled them), and they are freed.
// What a range stages of a tensor, one after another: m, v, then the master in
// a bf16 run, then the EMA with --ema. Returns how many; part[k] is this rank's
// piece of each (span->count elements), or NULL where it keeps none.
static int staged_parts(const Resident *r, const AdamWSpan *span, float *part[4]) {
    int n = 0;
    part[n++] = span->m;
    part[n++] = span->v;
    if (r->param_dtype == DTYPE_BF16) part[n++] = span->params;
    if (r->ema) part[n++] = span->count > 0 ? r->ema + (span->m - r->m) : NULL;
    return n;
}

static void unstage_rows(void *resident) {
    Resident *r = resident;
    const AdamWSpan *span = &r->spans[r->staged_tensor];
    size_t numel = r->staged_numel, at = r->staged_at;
    float *part[4];
    int parts = staged_parts(r, span, part);
    for (int k = 0; k < parts && span->count > 0; k++) device_copy(part[k], r->staged + k * numel + at, span->count);
    // an offloaded fp32 run's master is the range of the replica the rows are (a load wrote it)
    if (r->offload && r->param_dtype == DTYPE_FP32 && span->count > 0)
        device_copy(span->params, r->device_params[r->staged_tensor], span->count);
    device_free(&r->staging, MEM_COMM_BUFFERS, r->staged, parts * numel);
    r->staged = NULL;
    r->staged_tensor = -1;
}

LocalRows resident_stage_rows(Resident *r, const GPT2Layout *layout, Comm *comm, int t) {
    const GPT2Tensor *tensor = &layout->tensors[t];
    const AdamWSpan *span = &r->spans[t];
    float *part[4];
    int parts = staged_parts(r, span, part);
    size_t numel = tensor->numel, count = parts * numel;
    CHECK(r->range && !r->staged, "resident_stage_rows: tensor %d's rows are still staged", r->staged_tensor);
    r->staged = device_alloc(&r->staging, MEM_COMM_BUFFERS, count);  // zeroed: the other ranges' parts add in
    r->staged_tensor = t;
    r->staged_numel = numel;
    r->staged_at = span->count > 0 ? (size_t)(span->m - r->m) + r->lo - tensor->offset : 0;
    for (int k = 0; k < parts && span->count > 0; k++)
        device_copy(r->staged + k * numel + r->staged_at, part[k], span->count);
    comm_reduce(comm, r->staged, comm->rank == 0 ? r->staged : NULL, count, DTYPE_FP32, 0, COMM_SUM);
    LocalRows rows = {.row_begin = 0, .row_count = tensor->rows, .m = r->staged, .v = r->staged + numel,
                      .adam_step = &r->spans[t].step, .writes = comm->rank == 0, .done = unstage_rows, .done_arg = r};
    if (r->param_dtype == DTYPE_BF16) {  // a bf16 run stages its master too; a load rounds it into every replica
        rows.params = r->staged + 2 * numel;
        rows.working = dtype_at(r->params, tensor->offset, DTYPE_BF16);
    } else {
        rows.params = dtype_at(r->params, tensor->offset, DTYPE_FP32);
    }
    if (r->ema) rows.ema = r->staged + (parts - 1) * numel;
    return rows;
}

void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count) {
    size_t n = (size_t)row_count * layout->tensors[t].cols;
    if (src->dry) return;  // build/plan's: no values
    float *host = xmalloc(n * sizeof(float));  // the source is on the host; the part may be on a GPU
    param_source_rows(src, layout, t, row_begin, row_count, host);
    if (r->master) device_from_host(r->master + r->flat.offset[t], host, n);
    device_from_host_rounded(resident_params(r, t), host, n, r->param_dtype);
    if (r->ema) device_from_host(r->ema + r->flat.offset[t], host, n);  // the average starts at the weights
    free(host);
}

// The elements of a range that are the model's (its padding past P apart).
static size_t range_real_numel(const Resident *r) {
    size_t P = r->model->layout.num_params, lo = r->lo, hi = lo + r->state_numel;
    return lo < P ? (hi < P ? hi : P) - lo : 0;
}

void resident_load_replica(Resident *r, const ParamSource *src) {
    const GPT2Layout *layout = &r->model->layout;
    size_t P = layout->num_params, real = range_real_numel(r);
    if (src->dry) return;  // build/plan's: no values, and no host copy of a model the host may not hold
    float *host = xmalloc(P * sizeof(float));
    for (int t = 0; t < layout->num_tensors; t++)
        param_source_rows(src, layout, t, 0, layout->tensors[t].rows, host + layout->tensors[t].offset);
    device_from_host_rounded(r->params, host, P, r->param_dtype);
    if (r->master && real > 0) device_from_host(r->master, host + r->lo, real);
    if (r->ema && real > 0) device_from_host(r->ema, host + r->lo, real);
    free(host);
}

void resident_broadcast(Resident *r, Comm *comm, int root) {
    size_t n = r->flat.total;
    // offloaded, the master is in host memory, which a device's collectives cannot reach: it travels from a copy
    float *values = r->offload ? device_alloc(&r->staging, MEM_COMM_BUFFERS, n) : kept_values(r);
    if (r->offload) device_copy(values, r->master, n);
    comm_broadcast(comm, values, n, DTYPE_FP32, root);
    if (r->param_dtype == DTYPE_BF16) device_round(r->params, values, n);
    else if (r->offload) device_copy(r->params, values, n);
    if (r->ema) device_copy(r->ema, values, n);
    if (r->offload) {
        device_copy(r->master, values, n);
        device_free(&r->staging, MEM_COMM_BUFFERS, values, n);
    }
}

void resident_swap_ema(Resident *r) {
    CHECK(r->ema, "resident_swap_ema: the run keeps no EMA (--ema)");
    device_swap(kept_values(r), r->ema, r->state_numel);
    if (r->master) device_round(dtype_at(r->params, r->range ? r->lo : 0, DTYPE_BF16), r->master, r->state_numel);
    if (r->whole) resident_swap_ema(r->whole);
}

// Offloaded span t's gradients start down to the host.
static void start_down(Resident *r, int t) {
    AdamWSpan *span = &r->spans[t];
    void *grads = span->grads_bf16 ? (void *)span->grads_bf16 : span->grads;
    device_copy_start(grads, r->device_grads[t], span->count, r->grad_dtype);
    if (r->run->clock) sim_offload_down(r->run->clock, (double)(span->count * dtype_size(r->grad_dtype)));
}

// Span t's gradients are down (a wait covered them): AdamW on the CPU, and its
// parameters (the working copy of a bf16 run, else the master) start back up.
static void update_on_host(Resident *r, int t, AdamWConfig config) {
    AdamWSpan *span = &r->spans[t];
    device_host_adamw(span, config);
    void *params = span->working ? (void *)span->working : span->params;
    device_copy_start(r->device_params[t], params, span->count, r->param_dtype);
    // AdamW reads and writes the master, m and v, reads the gradients, writes the rounded params
    double adam_bytes = 24 + dtype_size(r->grad_dtype) + (span->working ? 2 : 0);
    if (r->run->clock) sim_offload_update(r->run->clock, r->reduced_down_at, span->count * adam_bytes,
                                            (double)(span->count * dtype_size(r->param_dtype)));
}

// The unit whose gradients went down last: its copies waited for, its spans are updated.
static void update_reduced_unit(Resident *r, AdamWConfig config) {
    if (r->reduced_unit < 0) return;
    device_copies_wait(r->reduced_mark);
    const GPT2Layout *layout = &r->model->layout;
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].home_unit == r->reduced_unit && r->spans[t].count > 0) update_on_host(r, t, config);
    r->reduced_unit = -1;
}

// The unit's spans still on the device start down, behind the device's work so
// far; then the unit that went down before them, whose copies had that work to
// travel behind, is updated. One unit's copies are waited for as one (mark).
static void offload_unit(Resident *r, int unit, AdamWConfig config) {
    const GPT2Layout *layout = &r->model->layout;
    int started = 0;
    for (int t = 0; t < layout->num_tensors; t++) {
        if (layout->tensors[t].home_unit != unit || r->spans[t].count == 0) continue;
        start_down(r, t);
        started = 1;
    }
    if (!started) return;
    long mark = device_copies_mark();
    double down_at = r->run->clock ? r->run->clock->host_link_free : 0;  // its last copy's end
    update_reduced_unit(r, config);
    r->reduced_unit = unit;
    r->reduced_mark = mark;
    r->reduced_down_at = down_at;
}

// Every unit from the last one down to `unit` has its gradient share final (the backward's order): those
// not gone down yet go, one after another.
static void offload_down_to(Resident *r, int unit, AdamWConfig config) {
    while (r->down_from > unit) offload_unit(r, --r->down_from, config);
}

void resident_unit_final(Resident *r, int unit) {
    OffloadEarly *early = r->run->offload_early;
    if (!r->offload || !early) return;
    double begin = timer_now();
    offload_down_to(r, unit, early->config);
    early->host_s += timer_now() - begin;
}

// The offloaded step: whatever is still on the device (all of it when a clip
// had to see the whole gradient first) goes down unit by unit as the backward
// made them, each updated behind the next one's copies; every parameter is back
// before the next forward reads it.
static void offloaded_step(Resident *r, int num_tensors, AdamWConfig config) {
    CHECK(!r->run->offload_early || memcmp(&r->run->offload_early->config, &config, sizeof config) == 0,
          "resident_step: the step's AdamW settings are not those its offloaded updates began with");
    CHECK(!r->run->offload_early || r->down_from == 0, "resident_step: units 0..%d were not updated as the "
          "backward made their gradients (resident_unit_final), only now", r->down_from - 1);
    offload_down_to(r, 0, config);
    update_reduced_unit(r, config);
    for (int t = 0; t < num_tensors; t++)
        if (r->spans[t].count == 0) r->spans[t].step++;
    r->down_from = r->model->layout.num_units;
    device_copies_wait(device_copies_mark());
    if (r->run->clock) sim_offload_wait(r->run->clock);
}

// The step on the device: AdamW on each span kept, and the EMA's move.
static void step_on_device(Resident *r, int num_tensors, AdamWConfig config) {
    for (int t = 0; t < num_tensors; t++) {
        const AdamWSpan *span = &r->spans[t];
        if (span->count == 0) {
            r->spans[t].step++;
            continue;
        }
        device_adamw(&r->spans[t], config);
        if (r->ema) device_ema_update(r->ema + (span->m - r->m), span->params, span->count, r->ema_decay);
    }
}

void resident_step(Resident *r, int num_tensors, AdamWConfig config) {
    if (r->offload) offloaded_step(r, num_tensors, config);
    else step_on_device(r, num_tensors, config);
    device_zero_as(r->grads, r->grads_numel, r->grad_dtype);
    if (r->whole) resident_step(r->whole, num_tensors, config);
}

void resident_add_whole(Resident *r, Resident *whole, int share) {
    r->whole = whole;
    r->whole_share = share;
}

int resident_grad_spans(const Resident *r, int share, GradSpan *spans) {
    spans[0] = resident_grad_span(r, share);
    if (!r->whole) return 1;
    spans[1] = resident_grad_span(r->whole, r->whole_share);
    return 2;
}

GradSpan resident_grad_span(const Resident *r, int share) {
    if (!r->range) return (GradSpan){.grads = r->grads, .count = r->flat.total, .share = share};
    size_t real = range_real_numel(r);  // the range's averaged gradient, less padding
    return (GradSpan){.grads = real > 0 ? resident_grad_at(r, r->lo) : r->grads, .count = real, .share = share};
}

// An offloaded part's rows are the host's master: after a load, the device's
// parameters are made from it again (the same values after a save).
static void offloaded_rows_done(void *resident) {
    Resident *r = resident;
    const AdamWSpan *span = &r->spans[r->rows_tensor];
    device_from_host_rounded(r->device_params[r->rows_tensor], span->params, span->count, r->param_dtype);
    r->rows_tensor = -1;
}

LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes) {
    size_t off = r->flat.offset[t];
    LocalRows rows = {.row_begin = row_begin, .row_count = row_count, .params = r->spans[t].params, .m = r->m + off,
                      .v = r->v + off, .ema = r->ema ? r->ema + off : NULL, .adam_step = &r->spans[t].step,
                      .writes = writes, .working = r->spans[t].working};
    if (r->offload) {
        rows.working = NULL;
        rows.done = offloaded_rows_done;
        rows.done_arg = r;
        r->rows_tensor = t;
    }
    return rows;
}

void resident_free(Resident *r, MemAccount *mem) {
    if (r->staged) unstage_rows(r);
    device_free_as(mem, MEM_PARAMS, r->params, r->params_numel, r->param_dtype);
    device_free_as(mem, MEM_GRADS, r->grads, r->grads_numel, r->grad_dtype);
    if (r->master) device_free(mem, optim_category(r), r->master, r->state_numel);
    device_free(mem, optim_category(r), r->m, r->state_numel);
    device_free(mem, optim_category(r), r->v, r->state_numel);
    if (r->host_grads) device_free_as(mem, MEM_HOST_STAGING, r->host_grads, r->state_numel, r->grad_dtype);
    if (r->host_working) device_free_as(mem, MEM_HOST_STAGING, r->host_working, r->state_numel, DTYPE_BF16);
    if (r->ema) device_free(mem, MEM_EMA, r->ema, r->state_numel);
    flat_layout_free(&r->flat);
    free(r->spans);
    free(r->device_grads);
    free(r->device_params);
    memset(r, 0, sizeof *r);
}
