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

#include "../common/errors.h"
#include "../common/partition.h"
#include "../common/strategy.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int reshard_after_forward;
    FlatLayout flat;                 // this rank's slice of every tensor, unit by unit
    float *params, *grads, *m, *v;   // (pad(P) / N) each
    AdamWSpan *spans;                // (num_tensors) one per slice
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

// One all-gather for every tensor of the unit not already here. Slices are
// packed into one send buffer; the receive buffer holds rank 0's pack, then rank
// 1's, ...; unpacking copies slice r of tensor t to rows [r*k, (r+1)*k) of t.
static void fsdp_gather_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    int world = s->comm->world;
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->gathered[t]) pack += s->flat.count[t];
    }
    if (pack == 0) return;
    float *send = mem_alloc_floats(s->mem, MEM_COMM_BUFFERS, pack);
    float *recv = mem_alloc_floats(s->mem, MEM_COMM_BUFFERS, pack * world);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->gathered[t]) continue;
        memcpy(send + at, s->params + s->flat.offset[t], s->flat.count[t] * sizeof(float));
        at += s->flat.count[t];
    }
    comm_all_gather(s->comm, send, recv, pack * world);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->gathered[t]) continue;
        size_t slice = s->flat.count[t];
        float *full = mem_alloc_floats(s->mem, MEM_PARAMS_GATHERED, slice * world);
        for (int r = 0; r < world; r++) memcpy(full + r * slice, recv + r * pack + at, slice * sizeof(float));
        s->model->params[t] = full;
        s->gathered[t] = 1;
        at += slice;
    }
    mem_free_floats(s->mem, MEM_COMM_BUFFERS, send, pack);
    mem_free_floats(s->mem, MEM_COMM_BUFFERS, recv, pack * world);
}

static void fsdp_release_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->gathered[t]) continue;
        mem_free_floats(s->mem, MEM_PARAMS_GATHERED, s->model->params[t], s->flat.count[t] * s->comm->world);
        s->model->params[t] = NULL;
        s->gathered[t] = 0;
    }
}

// One reduce-scatter for all of the unit's gradients: pack rank r's rows of every
// tensor as block r, so block r, averaged, lands on rank r; add it to my slices
// (the tied wte arrives twice: from the head and from unit 0).
static void fsdp_reduce_unit(FsdpState *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    int world = s->comm->world;
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) pack += s->flat.count[layout->unit_tensors[unit][i]];
    float *send = mem_alloc_floats(s->mem, MEM_COMM_BUFFERS, pack * world);
    float *recv = mem_alloc_floats(s->mem, MEM_COMM_BUFFERS, pack);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->flat.count[t];
        for (int r = 0; r < world; r++)
            memcpy(send + r * pack + at, s->model->grads[t] + r * slice, slice * sizeof(float));
        at += slice;
    }
    comm_reduce_scatter(s->comm, send, recv, pack * world, COMM_AVG);
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->flat.count[t];
        float *mine = s->grads + s->flat.offset[t];
        for (size_t k = 0; k < slice; k++) mine[k] += recv[at + k];
        mem_free_floats(s->mem, MEM_GRADS_GATHERED, s->model->grads[t], slice * world);
        s->model->grads[t] = NULL;
        at += slice;
    }
    mem_free_floats(s->mem, MEM_COMM_BUFFERS, send, pack * world);
    mem_free_floats(s->mem, MEM_COMM_BUFFERS, recv, pack);
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
    flat_layout_init(&s->flat, layout, count);
    free(count);
    s->params = mem_alloc_floats(s->mem, MEM_PARAMS, s->flat.total);
    s->grads = mem_alloc_floats(s->mem, MEM_GRADS, s->flat.total);
    s->m = mem_alloc_floats(s->mem, MEM_OPTIM, s->flat.total);
    s->v = mem_alloc_floats(s->mem, MEM_OPTIM, s->flat.total);
    s->spans = xcalloc((size_t)layout->num_tensors, sizeof(AdamWSpan));
    s->gathered = xcalloc((size_t)layout->num_tensors, sizeof(int));
    for (int t = 0; t < layout->num_tensors; t++) {
        size_t off = s->flat.offset[t];
        const GPT2Tensor *tensor = &layout->tensors[t];
        // each rank makes its own rows; rows past the end (padding) stay zero
        int k = fsdp_slice_rows(tensor, s->comm->world);
        int first = s->comm->rank * k;
        int rows = first >= tensor->rows ? 0 : (first + k > tensor->rows ? tensor->rows - first : k);
        if (rows > 0) param_source_rows(&ctx->source, layout, t, first, rows, s->params + off);
        s->spans[t] = (AdamWSpan){s->params + off, s->grads + off, s->m + off, s->v + off,
                                  s->flat.count[t], 0};
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
        s->model->grads[t] = mem_alloc_floats(s->mem, MEM_GRADS_GATHERED, s->flat.count[t] * s->comm->world);
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
    for (int t = 0; t < s->model->layout.num_tensors; t++) adamw_step_span(&s->spans[t], config);
    memset(s->grads, 0, s->flat.total * sizeof(float));
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
                memcpy(flat + layout->tensors[t].offset, s->model->params[t],
                       layout->tensors[t].numel * sizeof(float));
        fsdp_release_unit(s, u);
    }
}

// Rank r keeps rows [r*k, (r+1)*k) of every tensor, less the padding rows.
static int fsdp_local_rows(void *state, int t, LocalRows *rows) {
    FsdpState *s = state;
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    int k = fsdp_slice_rows(tensor, s->comm->world), first = s->comm->rank * k;
    int count = first >= tensor->rows ? 0 : (first + k > tensor->rows ? tensor->rows - first : k);
    if (count == 0) return 0;
    size_t off = s->flat.offset[t];
    *rows = (LocalRows){first, count, s->params + off, s->m + off, s->v + off, &s->spans[t].step, 1};
    return 1;
}

static void fsdp_free(void *state) {
    FsdpState *s = state;
    mem_free_floats(s->mem, MEM_PARAMS, s->params, s->flat.total);
    mem_free_floats(s->mem, MEM_GRADS, s->grads, s->flat.total);
    mem_free_floats(s->mem, MEM_OPTIM, s->m, s->flat.total);
    mem_free_floats(s->mem, MEM_OPTIM, s->v, s->flat.total);
    flat_layout_free(&s->flat);
    free(s->spans);
    free(s->gathered);
    free(s);
}
