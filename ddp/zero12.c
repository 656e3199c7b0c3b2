// zero12.c: ZeRO stages 1 and 2 by flat ranges. All P parameters, concatenated
// in llm.c's order and padded to pad(P) = N*S, are cut into N contiguous ranges
// of S = ceil(P/N) elements (common/partition.c); rank r owns range r: it alone
// keeps that range's AdamW moments and runs the optimizer on it. Every rank
// still holds the whole model's parameters, as in DDP. After each unit's
// backward, every gradient tensor homed in that unit (one bucket, as in DDP) is
// reduced piece by piece onto the owners of the ranges it crosses (a
// reduce-scatter of the bucket along the range boundaries, which is how
// DeepSpeed reduces its buckets), started non-blocking so that it overlaps the
// backward of the units below. After AdamW on its range, each rank's updated
// range is all-gathered so that every rank has the whole new model again.
//   ZeRO-1: every rank keeps a full gradient buffer; each owner reduces its
//           pieces in place and steps from there.
//   ZeRO-2: the resident gradient is this rank's range only. A unit's backward
//           writes into temporary full-size gradient tensors, reduced in place
//           like ZeRO-1's, after which the owner adds its pieces to its range;
//           they are freed once their reduce is done (waited for after the next
//           unit's backward, finish_grads for the last), so only the buckets in
//           flight are ever full size.
// With K micro-batches, ZeRO-1 adds them up in its full buffer and reduces once,
// as DDP does; ZeRO-2 reduces every micro-batch into its range (sync-each), or
// keeps every full-size gradient until the last and reduces once (no-sync).
//
//   flat model:  | wte   wpe   ln1w ... | ... qkvw ... | ...  fcprojb lnfw lnfb |pad|
//   ranges:      |<---- rank 0 ---->|<---- rank 1 ---->|<---- rank 2 ---->|<- 3 ->|
//   backward u:  grads of u's tensors --reduce(avg) per piece--> owner of each piece
//   step:        AdamW on my range -> all-gather ranges -> full model everywhere
//
// Per rank: params 4 pad(P), AdamW 8 S; grads 4 P (ZeRO-1) or 4 S plus the
// unit buckets in flight (ZeRO-2). Per step: one reduce per piece of a tensor
// inside one range, so each rank sends 4 (P - its real range) and receives
// 4 (P - rank r-1's real range); then one all-gather of pad(P), (N-1)/N * 4 pad(P)
// each way. That is DDP's all-reduce, 2 (N-1)/N * 4P, up to the padding.
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master of the range joins its AdamW state: params 2 pad(P), grads 2 P or
// 2 S, AdamW 12 S, and half the bytes on the wire.
//
// The tied wte is used by unit 0 and by the head; its gradient sums both uses
// and travels with unit 0's bucket, after the last of them.
//
// Checkpoints want whole rows, with their AdamW moments, and a range may cut a
// row. Every rank reports every row (its parameters are the full replica);
// rank 0 writes them. The moments of the tensor asked for are assembled in a
// staging buffer by a reduce onto rank 0 (every rank asks for every tensor in
// the same order: common/checkpoint.c); a load fills the staging buffer, and
// each rank copies its range back out of it before it next asks, or trains.
#include <stdlib.h>

#include "../common/device.h"
#include "../common/util/errors.h"
#include "ddp.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int stage;                       // 1 or 2
    AccumMode accum_mode;            // ZeRO-2 with micro-batches: reduce each one, or keep full gradients
    size_t lo, hi;                   // this rank's range [lo, hi) of the padded flat model
    DType param_dtype, grad_dtype;   // the model's
    void *params;                    // (pad(P)) the full replica, llm.c's order
    void *grads;                     // (P) ZeRO-1: full; (S) ZeRO-2: this rank's range
    float *master;                   // (S) bf16 runs: the fp32 master of this rank's range; else NULL
    float *m, *v;                    // (S) AdamW moments of this rank's range
    AdamWSpan *spans;                // (num_tensors) tensor t's part of the range; count 0 if none
    int *piece_start;                // (num_tensors + 1) tensor t's pieces are pending[piece_start[t] ..]
    CommHandle *pending;             // one reduce per piece: a tensor's part inside one range
    MemAccount scratch;              // checkpoint staging: not training memory
    int staged_tensor;               // -1, or the tensor whose moments are in `staged`
    float *staged;                   // (staged_arrays numel) m, v (and the master) of staged_tensor, whole
    int staged_arrays;               // 2, or 3 with a master
} State;

static size_t range_numel(const State *s) { return s->hi - s->lo; }
static size_t grads_numel(const State *s) { return s->stage == 1 ? s->model->layout.num_params : range_numel(s); }

// Where the owner's reduced gradient of flat element `first` goes.
static void *grad_slot(const State *s, size_t first) {
    return dtype_at(s->grads, s->stage == 1 ? first : first - s->lo, s->grad_dtype);
}

// AdamW's view of this rank's part [begin, begin + count) of the flat model:
// the replica's own elements, or in a bf16 run the master's, rounded into the
// replica after each update.
static AdamWSpan range_span(const State *s, size_t begin, size_t count) {
    float *values = s->master ? s->master + (begin - s->lo) : dtype_at(s->params, begin, DTYPE_FP32);
    bf16 *working = s->master ? dtype_at(s->params, begin, DTYPE_BF16) : NULL;
    return adamw_span(values, grad_slot(s, begin), s->grad_dtype, s->m + (begin - s->lo), s->v + (begin - s->lo),
                      working, count);
}

// Where this rank's part of tensor t starts, counted from the tensor's start.
static size_t span_start_in_tensor(const State *s, int t) {
    return (size_t)(s->spans[t].m - s->m) + s->lo - s->model->layout.tensors[t].offset;
}

// A checkpoint is done with the staged tensor: take this rank's range back.
static void unstage_moments(State *s) {
    int t = s->staged_tensor;
    if (t < 0) return;
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    const AdamWSpan *span = &s->spans[t];
    if (span->count > 0) {
        size_t at = span_start_in_tensor(s, t);
        device_copy(span->m, s->staged + at, span->count);
        device_copy(span->v, s->staged + tensor->numel + at, span->count);
        if (s->master) device_copy(span->params, s->staged + 2 * tensor->numel + at, span->count);
    }
    device_free(&s->scratch, MEM_COMM_BUFFERS, s->staged, s->staged_arrays * tensor->numel);
    s->staged = NULL;
    s->staged_tensor = -1;
}

// Assembles tensor t's whole m and v (and master) on rank 0: each rank puts its
// range's part into a zeroed buffer, and a sum onto rank 0 joins them.
static void stage_moments(State *s, int t) {
    unstage_moments(s);
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    const AdamWSpan *span = &s->spans[t];
    size_t count = s->staged_arrays * tensor->numel;
    s->staged = device_alloc(&s->scratch, MEM_COMM_BUFFERS, count);
    s->staged_tensor = t;
    if (span->count > 0) {
        size_t at = span_start_in_tensor(s, t);
        device_copy(s->staged + at, span->m, span->count);
        device_copy(s->staged + tensor->numel + at, span->v, span->count);
        if (s->master) device_copy(s->staged + 2 * tensor->numel + at, span->params, span->count);
    }
    comm_reduce(s->comm, s->staged, s->comm->rank == 0 ? s->staged : NULL, count, DTYPE_FP32, 0, COMM_SUM);
}

// Gives the unit's tensors zeroed full-size gradients where they have none yet
// (ZeRO-2; the head's wte keeps its buffer until unit 0 is done with it).
static void alloc_unit_grads(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->model->grads[t])
            s->model->grads[t] = device_alloc_as(s->mem, MEM_GRADS_GATHERED, layout->tensors[t].numel, s->grad_dtype);
    }
}

// Starts the reduce of every tensor homed in the unit: one per range it crosses,
// onto that range's owner, in place (the owner's piece of the gradient it sent
// becomes the average).
static void reduce_bucket(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    size_t P = layout->num_params;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        if (tensor->home_unit != unit) continue;
        int first_owner = zero12_owner(P, s->comm->world, tensor->offset);
        for (int k = s->piece_start[t]; k < s->piece_start[t + 1]; k++) {
            int owner = first_owner + (k - s->piece_start[t]);
            size_t begin, end;
            zero12_overlap(P, s->comm->world, owner, tensor->offset, tensor->numel, &begin, &end);
            void *piece = dtype_at(s->model->grads[t], begin - tensor->offset, s->grad_dtype);
            s->pending[k] = comm_reduce_start(s->comm, piece, owner == s->comm->rank ? piece : NULL, end - begin,
                                              s->grad_dtype, owner, COMM_AVG);
        }
    }
}

// Waits for the unit's bucket; ZeRO-2 then adds its own piece (if any) to its
// range and frees the full-size gradients.
static void finish_bucket(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    size_t P = layout->num_params;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        if (tensor->home_unit != unit) continue;
        for (int k = s->piece_start[t]; k < s->piece_start[t + 1]; k++) comm_wait(s->comm, &s->pending[k]);
        if (s->stage == 1) continue;
        size_t begin, end;
        if (zero12_overlap(P, s->comm->world, s->comm->rank, tensor->offset, tensor->numel, &begin, &end) > 0)
            device_add_as(grad_slot(s, begin), dtype_at(s->model->grads[t], begin - tensor->offset, s->grad_dtype),
                          end - begin, s->grad_dtype);
        device_free_as(s->mem, MEM_GRADS_GATHERED, s->model->grads[t], tensor->numel, s->grad_dtype);
        s->model->grads[t] = NULL;
    }
}

// Parameters are always resident: nothing to fetch or release (a checkpoint's
// staged moments go home before training touches them).
static void before_forward(void *state, int unit) {
    (void)unit;
    unstage_moments(state);
}
static void after_forward(void *state, int unit) { (void)state; (void)unit; }

static void before_backward(void *state, int unit) {
    State *s = state;
    if (s->stage == 2) alloc_unit_grads(s, unit);
}

// The unit's gradients are final once its backward is done (the tied wte's only
// after unit 0): start reducing them while the units below compute. ZeRO-1
// nudges the buckets in flight along; ZeRO-2 waits for the bucket started one
// unit ago, which had this unit's backward to travel, and frees it. Before the
// last micro-batch, gradients only add up in place, except in ZeRO-2's sync-each.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    int units = s->model->layout.num_units;
    if (!last_micro_batch && !(s->stage == 2 && s->accum_mode == ACCUM_SYNC_EACH)) return;
    reduce_bucket(s, unit);
    if (s->stage == 2) {
        if (unit + 1 < units) finish_bucket(s, unit + 1);
        if (unit == 0 && !last_micro_batch) finish_bucket(s, 0);  // the next micro-batch's head needs a fresh wte
        return;
    }
    for (int k = s->piece_start[0]; k < s->piece_start[s->model->layout.num_tensors]; k++)
        comm_progress(s->comm, &s->pending[k]);
}

static void finish_grads(void *state) {
    State *s = state;
    int units = s->model->layout.num_units;
    for (int u = s->stage == 2 ? 0 : units - 1; u >= 0; u--) finish_bucket(s, u);
}

// AdamW on this rank's range, then everyone's range to everyone. A tensor's step
// count advances on every rank, so that any rank can report it.
static void step(void *state, AdamWConfig config) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int t = 0; t < layout->num_tensors; t++) {
        if (s->spans[t].count > 0) device_adamw(&s->spans[t], config);
        else s->spans[t].step++;
    }
    device_zero_as(s->grads, grads_numel(s), s->grad_dtype);
    size_t S = range_numel(s);
    void *send = device_alloc_as(s->mem, MEM_COMM_BUFFERS, S, s->param_dtype);  // MPI's input may not overlap its output
    device_copy_as(send, dtype_at(s->params, s->lo, s->param_dtype), S, s->param_dtype);
    comm_all_gather(s->comm, send, s->params, S * (size_t)s->comm->world, s->param_dtype);
    device_free_as(s->mem, MEM_COMM_BUFFERS, send, S, s->param_dtype);
}

static void gather_full_model(void *state, float *flat) {
    State *s = state;
    if (s->comm->rank != 0) return;  // every replica is the same: rank 0's is the model
    device_to_host_widened(flat, s->params, s->model->layout.num_params, s->param_dtype);
}

// Every rank keeps every row's parameters; rank 0 alone writes them, with the
// moments staged from all ranges (see the top). A bf16 run stages its master
// too, and a load rounds it into every rank's working replica.
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    stage_moments(s, t);
    *rows = (LocalRows){.row_begin = 0, .row_count = tensor->rows, .m = s->staged, .v = s->staged + tensor->numel,
                        .adam_step = &s->spans[t].step, .writes = s->comm->rank == 0};
    if (s->master) {
        rows->params = s->staged + 2 * tensor->numel;
        rows->working = dtype_at(s->params, tensor->offset, DTYPE_BF16);
    } else {
        rows->params = dtype_at(s->params, tensor->offset, DTYPE_FP32);
    }
    return 1;
}

// The averaged gradient of this rank's range, less padding: ZeRO-1's other
// elements hold this rank's own, unreduced partial sums.
static int local_grads(void *state, void **grads, size_t *count) {
    State *s = state;
    size_t P = s->model->layout.num_params, end = s->hi < P ? s->hi : P;
    *count = s->lo < end ? end - s->lo : 0;
    *grads = *count > 0 ? grad_slot(s, s->lo) : s->grads;
    return 1;
}

static void destroy(void *state) {
    State *s = state;
    unstage_moments(s);
    device_free_as(s->mem, MEM_PARAMS, s->params, range_numel(s) * (size_t)s->comm->world, s->param_dtype);
    device_free_as(s->mem, MEM_GRADS, s->grads, grads_numel(s), s->grad_dtype);
    if (s->master) device_free(s->mem, MEM_OPTIM, s->master, range_numel(s));
    device_free(s->mem, MEM_OPTIM, s->m, range_numel(s));
    device_free(s->mem, MEM_OPTIM, s->v, range_numel(s));
    free(s->spans);
    free(s->piece_start);
    free(s->pending);
    free(s);
}

Strategy zero12_init(const StrategyContext *ctx) {
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    size_t P = layout->num_params;
    int world = ctx->comm->world;
    s->model = model;
    s->comm = ctx->comm;
    s->mem = ctx->mem;
    s->stage = ((const DdpOptions *)ctx->options)->zero_stage;
    s->accum_mode = ctx->accum_mode;
    CHECK(s->stage == 1 || s->stage == 2, "zero12_init: stage %d", s->stage);
    s->staged_tensor = -1;
    zero12_range(P, world, s->comm->rank, &s->lo, &s->hi);
    s->param_dtype = model->param_dtype;
    s->grad_dtype = model->grad_dtype;
    s->params = device_alloc_as(s->mem, MEM_PARAMS, range_numel(s) * (size_t)world, s->param_dtype);
    s->grads = device_alloc_as(s->mem, MEM_GRADS, grads_numel(s), s->grad_dtype);
    // the master copy is optimizer state, as in the ZeRO paper's 2 + 2 + 12 bytes
    s->master = s->param_dtype == DTYPE_BF16 ? device_alloc(s->mem, MEM_OPTIM, range_numel(s)) : NULL;
    s->staged_arrays = s->master ? 3 : 2;
    s->m = device_alloc(s->mem, MEM_OPTIM, range_numel(s));
    s->v = device_alloc(s->mem, MEM_OPTIM, range_numel(s));
    s->spans = xcalloc((size_t)layout->num_tensors, sizeof(AdamWSpan));
    s->piece_start = xcalloc((size_t)layout->num_tensors + 1, sizeof(int));
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        size_t begin, end, count = zero12_overlap(P, world, s->comm->rank, tensor->offset, tensor->numel, &begin, &end);
        if (count > 0)
            s->spans[t] = range_span(s, begin, count);
        int first_owner = zero12_owner(P, world, tensor->offset);
        int last_owner = zero12_owner(P, world, tensor->offset + tensor->numel - 1);
        s->piece_start[t + 1] = s->piece_start[t] + last_owner - first_owner + 1;
        model->params[t] = dtype_at(s->params, tensor->offset, s->param_dtype);  // the replica, for good
        model->grads[t] = s->stage == 1 ? dtype_at(s->grads, tensor->offset, s->grad_dtype) : NULL;
    }
    s->pending = xcalloc((size_t)s->piece_start[layout->num_tensors], sizeof(CommHandle));
    // every rank makes the whole model from the source, so the replicas start
    // identical: its replica (in the working dtype) and its range's master
    float *host = xmalloc(P * sizeof(float));
    for (int t = 0; t < layout->num_tensors; t++)
        param_source_rows(&ctx->source, layout, t, 0, layout->tensors[t].rows, host + layout->tensors[t].offset);
    device_from_host_rounded(s->params, host, P, s->param_dtype);
    if (s->master && s->lo < P) device_from_host(s->master, host + s->lo, (s->hi < P ? s->hi : P) - s->lo);
    free(host);
    strategy_note(ctx, "zero%d: %d ranges of %zu elements (P = %zu, %zu of padding)\n", s->stage, world,
                  range_numel(s), P, range_numel(s) * (size_t)world - P);
    return STRATEGY_TABLE(s->stage == 1 ? "zero1" : "zero2", s);
}
