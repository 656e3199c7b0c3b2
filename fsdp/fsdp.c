// fsdp.c: Fully Sharded Data Parallel by dim-0 slicing. Every tensor is cut
// along dim 0 into N equal slices (dim 0 padded up to a multiple of N with rows
// that stay zero); rank r keeps slice r of every tensor, of its gradient and of
// its AdamW state. Before a unit runs (forward, and again backward) one
// all-gather over a flat buffer rebuilds the unit's full tensors; after forward
// they are freed (or kept until backward with --reshard-after-forward 0, the
// ZeRO-2-like trade of memory for traffic). After the unit's backward one
// reduce-scatter leaves each rank the averaged gradient of its own slices.
//
//   qkvw (3C, C):  rows 0..k-1 -> rank 0 | rows k..2k-1 -> rank 1 | ... (padded)
//
//   before unit u:  pack my slices -> all-gather -> unpack full tensors
//   after  unit u:  pack full grads by rank -> reduce-scatter(avg) -> my slices +=
//
// Per rank: 16 bytes per parameter / N (padded). Per step: two all-gathers and one
// reduce-scatter of pad(P), plus wte once more in each for its second use (the
// head); one all-gather fewer when not resharding after forward.
#include <stdlib.h>
#include <string.h>

#include "../common/device.h"
#include "../common/errors.h"
#include "../common/resident.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int reshard_after_forward;
    Resident resident;               // this rank's slice of every tensor
    int *gathered;                   // (num_tensors) 1 while model->params[t] is the full tensor
} FsdpState;

static void fsdp_before_forward(void *state, int unit);
static void fsdp_after_forward(void *state, int unit);
static void fsdp_before_backward(void *state, int unit);
static void fsdp_after_backward(void *state, int unit);
static void fsdp_finish_grads(void *state);
static void fsdp_step(void *state, AdamWConfig config);
static void fsdp_gather_full_model(void *state, float *flat);
static int fsdp_local_rows(void *state, int t, LocalRows *rows);
static void fsdp_free(void *state);

// Rows of tensor t that hold real data in this rank's slice (the rest is padding).
static int real_rows(const FsdpState *s, int t, int *first) {
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    int k = fsdp_slice_rows(tensor, s->comm->world);
    *first = s->comm->rank * k;
    return *first >= tensor->rows ? 0 : (*first + k > tensor->rows ? tensor->rows - *first : k);
}

// One all-gather for every tensor of the unit not already here. Slices are
// packed into one send buffer; the receive buffer holds rank 0's pack, then rank
// 1's, ...; unpacking copies slice r of tensor t to rows [r*k, (r+1)*k) of t.
static void fsdp_gather_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    const FlatLayout *flat = &s->resident.flat;
    int world = s->comm->world;
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->gathered[t]) pack += flat->count[t];
    }
    if (pack == 0) return;
    float *send = device_alloc(s->mem, MEM_COMM_BUFFERS, pack);
    float *recv = device_alloc(s->mem, MEM_COMM_BUFFERS, pack * world);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->gathered[t]) continue;
        device_copy(send + at, s->resident.params + flat->offset[t], flat->count[t]);
        at += flat->count[t];
    }
    comm_all_gather(s->comm, send, recv, pack * world);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->gathered[t]) continue;
        size_t slice = flat->count[t];
        float *full = device_alloc(s->mem, MEM_PARAMS_GATHERED, slice * world);
        for (int r = 0; r < world; r++) device_copy(full + r * slice, recv + r * pack + at, slice);
        s->model->params[t] = full;
        s->gathered[t] = 1;
        at += slice;
    }
    device_free(s->mem, MEM_COMM_BUFFERS, send, pack);
    device_free(s->mem, MEM_COMM_BUFFERS, recv, pack * world);
}

static void fsdp_release_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->gathered[t]) continue;
        device_free(s->mem, MEM_PARAMS_GATHERED, s->model->params[t], s->resident.flat.count[t] * s->comm->world);
        s->model->params[t] = NULL;
        s->gathered[t] = 0;
    }
}

// One reduce-scatter for all of the unit's gradients: pack rank r's rows of every
// tensor as block r, so block r, averaged, lands on rank r; add it to my slices
// (the tied wte arrives twice: from the head and from unit 0).
static void fsdp_reduce_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    const FlatLayout *flat = &s->resident.flat;
    int world = s->comm->world;
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) pack += flat->count[layout->unit_tensors[unit][i]];
    float *send = device_alloc(s->mem, MEM_COMM_BUFFERS, pack * world);
    float *recv = device_alloc(s->mem, MEM_COMM_BUFFERS, pack);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = flat->count[t];
        for (int r = 0; r < world; r++) device_copy(send + r * pack + at, s->model->grads[t] + r * slice, slice);
        at += slice;
    }
    comm_reduce_scatter(s->comm, send, recv, pack * world, COMM_AVG);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = flat->count[t];
        device_add(s->resident.grads + flat->offset[t], recv + at, slice);
        device_free(s->mem, MEM_GRADS_GATHERED, s->model->grads[t], slice * world);
        s->model->grads[t] = NULL;
        at += slice;
    }
    device_free(s->mem, MEM_COMM_BUFFERS, send, pack * world);
    device_free(s->mem, MEM_COMM_BUFFERS, recv, pack);
}

Strategy fsdp_init(const StrategyContext *ctx) {
    FsdpState *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->comm = ctx->comm;
    s->mem = ctx->mem;
    s->reshard_after_forward = ctx->reshard_after_forward;
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = fsdp_slice_numel(&layout->tensors[t], s->comm->world);
    resident_init(&s->resident, layout, count, s->mem);
    free(count);
    s->gathered = xcalloc((size_t)layout->num_tensors, sizeof(int));
    for (int t = 0; t < layout->num_tensors; t++) {
        // each rank makes its own rows; rows past the end (padding) stay zero
        int first, rows = real_rows(s, t, &first);
        if (rows > 0) resident_load_rows(&s->resident, layout, &ctx->source, t, first, rows);
    }
    return (Strategy){
        .name = "fsdp", .state = s,
        .before_forward = fsdp_before_forward, .after_forward = fsdp_after_forward,
        .before_backward = fsdp_before_backward, .after_backward = fsdp_after_backward,
        .finish_grads = fsdp_finish_grads, .step = fsdp_step,
        .gather_full_model = fsdp_gather_full_model, .local_rows = fsdp_local_rows,
        .free = fsdp_free,
    };
}

static void fsdp_before_forward(void *state, int unit) { fsdp_gather_unit(state, unit); }

static void fsdp_after_forward(void *state, int unit) {
    FsdpState *s = state;
    if (s->reshard_after_forward) fsdp_release_unit(s, unit);
}

// Gather again where released, and give the unit zeroed full-size (padded)
// gradient buffers.
static void fsdp_before_backward(void *state, int unit) {
    FsdpState *s = state;
    const GPT2Layout *layout = &s->model->layout;
    fsdp_gather_unit(s, unit);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        s->model->grads[t] = device_alloc(s->mem, MEM_GRADS_GATHERED, s->resident.flat.count[t] * s->comm->world);
    }
}

static void fsdp_after_backward(void *state, int unit) {
    fsdp_reduce_unit(state, unit);
    fsdp_release_unit(state, unit);
}

// The reduce-scatters above are blocking: nothing is left in flight.
static void fsdp_finish_grads(void *state) { (void)state; }

static void fsdp_step(void *state, AdamWConfig config) {
    FsdpState *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

// Unit by unit: gather, let rank 0 copy what is at home in the unit (without
// the padding rows), release.
static void fsdp_gather_full_model(void *state, float *flat) {
    FsdpState *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int u = 0; u < layout->num_units; u++) {
        fsdp_gather_unit(s, u);
        for (int t = 0; t < layout->num_tensors; t++)
            if (s->comm->rank == 0 && layout->tensors[t].home_unit == u)
                device_to_host(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel);
        fsdp_release_unit(s, u);
    }
}

// Rank r keeps rows [r*k, (r+1)*k) of every tensor, less the padding rows.
static int fsdp_local_rows(void *state, int t, LocalRows *rows) {
    FsdpState *s = state;
    int first, count = real_rows(s, t, &first);
    if (count == 0) return 0;
    *rows = resident_rows(&s->resident, t, first, count, 1);
    return 1;
}

static void fsdp_free(void *state) {
    FsdpState *s = state;
    resident_free(&s->resident, s->mem);
    free(s->gathered);
    free(s);
}
