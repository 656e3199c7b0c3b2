// zero12.c: ZeRO stages 1 and 2 by flat ranges. All P parameters, concatenated in
// llm.c's order and padded to N*R elements, are cut into N contiguous ranges of
// R = ceil(P/N) elements (kit/partition.c); rank r alone keeps range r's AdamW
// moments and steps it. Every rank still holds the whole model's parameters, as in
// DDP. After each unit's backward, every gradient tensor homed in it (one bucket) is
// reduced piece by piece onto the owners of the ranges it crosses (a reduce-scatter
// along the range boundaries, as DeepSpeed reduces its buckets), non-blocking, under
// the backward of the units below. After AdamW, each rank's range is all-gathered.
//   ZeRO-1: every rank keeps a full gradient buffer; each owner reduces its
//           pieces in place and steps from there.
//   ZeRO-2: the resident gradient is this rank's range only. A unit's backward
//           writes into temporary full-size gradients, reduced in place like
//           ZeRO-1's; the owner adds its pieces to its range, and they are freed
//           once reduced (after the next unit's backward): only the buckets in
//           flight, and the head's wte until unit 0's, are full size (no-sync:
//           all, until the last micro-batch).
//
//   flat model:  | wte   wpe   ln1w ... | ... qkvw ... | ...  fcprojb lnfw lnfb |pad|
//   ranges:      |<---- rank 0 ---->|<---- rank 1 ---->|<---- rank 2 ---->|<- 3 ->|
//   backward u:  grads of u's tensors --reduce(avg) per piece--> owner of each piece
//   step:        AdamW on my range -> all-gather ranges -> full model everywhere
//
// Per rank: params 4 N R, AdamW 8 R; grads 4 P (ZeRO-1) or 4 R plus the
// unit buckets in flight (ZeRO-2). Per step: one reduce per piece of a tensor
// inside one range, so each rank sends 4 (P - its real range) and receives
// 4 (P - rank r-1's real range); then one all-gather of N R, (N-1)/N * 4 N R
// each way. That is DDP's all-reduce, 2 (N-1)/N * 4P, up to the padding.
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master of the range joins its AdamW state: params 2 N R, grads 2 P or
// 2 R, AdamW 12 R, and half the bytes on the wire.
#include <stdlib.h>

#include "kit/kit.h"
#include "ddp/ddp.h"

typedef struct {
    GPT2 *model;
    Comm *comm;
    MemAccount *mem;
    int stage;                       // 1 or 2
    Resident resident;               // the full replica, this rank's range of AdamW state, and the
                                     // gradients of the whole model (ZeRO-1) or of the range (ZeRO-2)
    int *piece_start;                // (num_tensors + 1) tensor t's pieces are reduces[piece_start[t] ..]
    CommHandle *reduces;             // one reduce per piece in flight: a tensor's part inside one range
    AccumMode accum_mode;            // with micro-batches: reduce each one (ZeRO-2), or keep full gradients
} State;

// The unit's parameters, whole, now: resident for good, nothing to fetch.
static void gather_unit(State *s, int unit, int direction) {
    (void)s, (void)unit, (void)direction;
}

static void release_unit(State *s, int unit, int direction) {
    (void)s, (void)unit, (void)direction;  // nothing to release either
}

// Starts the reduce of every tensor homed in the unit: one per range it crosses,
// onto that range's owner, in place (the owner's piece of the gradient it sent
// becomes the average).
static void start_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    size_t P = layout->num_params;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        if (tensor->home_unit != unit) continue;
        int first_owner = flat_range_owner(P, s->comm->world, tensor->offset);
        for (int k = s->piece_start[t]; k < s->piece_start[t + 1]; k++) {
            int owner = first_owner + (k - s->piece_start[t]);
            size_t begin, end;
            flat_range_overlap(P, s->comm->world, owner, tensor->offset, tensor->numel, &begin, &end);
            void *piece = dtype_at(s->model->grads[t], begin - tensor->offset, s->model->grad_dtype);
            s->reduces[k] = comm_reduce_start(s->comm, piece, owner == s->comm->rank ? piece : NULL, end - begin,
                                              s->model->grad_dtype, owner, COMM_AVG);
        }
    }
}

// Waits for the unit's bucket; ZeRO-2 then adds its own piece (if any) to its
// range and frees the full-size gradients.
static void finish_reduce(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    size_t P = layout->num_params;
    DType dtype = s->model->grad_dtype;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        if (tensor->home_unit != unit) continue;
        for (int k = s->piece_start[t]; k < s->piece_start[t + 1]; k++) comm_wait(s->comm, &s->reduces[k]);
        if (s->stage == 1) continue;
        size_t begin, end;
        if (flat_range_overlap(P, s->comm->world, s->comm->rank, tensor->offset, tensor->numel, &begin, &end) > 0)
            device_add_as(resident_grad_at(&s->resident, begin), dtype_at(s->model->grads[t], begin - tensor->offset, dtype),
                          end - begin, dtype);
        free_full_grads(s->model, s->mem, t, 1);
    }
    resident_unit_final(&s->resident, unit);
}

static void before_forward(void *state, int unit) { gather_unit(state, unit, +1); }
static void after_forward(void *state, int unit, int backward_follows) {
    State *s = state;
    release_unit(s, unit, backward_follows ? +1 : 0);
}

// ZeRO-2: zeroed full-size gradient buffers for the unit (or the ones an earlier
// micro-batch kept, without a reduce, to add into).
static void before_backward(void *state, int unit) {
    State *s = state;
    gather_unit(s, unit, -1);
    if (s->stage == 2) alloc_unit_grads(s->model, s->mem, unit, 1);
}

// The unit's gradients are final after its backward (the tied wte's after unit 0): start reducing them
// under the units below. ZeRO-1 nudges those in flight; ZeRO-2 waits for the bucket started one unit ago,
// which had this unit's backward to travel, and frees it.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch || s->accum_mode == ACCUM_SYNC_EACH) {
        start_reduce(s, unit);
        for (int k = 0; s->stage == 1 && k < s->piece_start[s->model->layout.num_tensors]; k++)
            comm_progress(s->comm, &s->reduces[k]);
        if (s->stage == 2 && unit + 1 < s->model->layout.num_units) finish_reduce(s, unit + 1);
        // the next micro-batch's head must find no gradient still on its way
        if (s->stage == 2 && unit == 0 && !last_micro_batch) finish_reduce(s, 0);
    }
}

static void finish_grads(void *state) {
    State *s = state;
    for (int u = s->stage == 2 ? 0 : s->model->layout.num_units - 1; u >= 0; u--) finish_reduce(s, u);
}

// Everyone's range of the replica to everyone.
static void gather_ranges(State *s) {
    Resident *r = &s->resident;
    void *send = device_alloc_as(s->mem, MEM_COMM_BUFFERS, r->state_numel, r->param_dtype);  // MPI's input may not
    device_copy_as(send, dtype_at(r->params, r->lo, r->param_dtype), r->state_numel, r->param_dtype);  // be its output
    comm_all_gather(s->comm, send, r->params, r->params_numel, r->param_dtype);
    device_free_as(s->mem, MEM_COMM_BUFFERS, send, r->state_numel, r->param_dtype);
}

// AdamW on this rank's range, then everyone's range to everyone.
static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
    gather_ranges(s);
}

// Unit by unit: fetch, let rank 0 copy what is at home in the unit, release.
static void gather_full_model(void *state, float *flat) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) {
        gather_unit(s, u, 0);
        if (s->comm->rank == 0) unit_params_to_host(s->model, u, flat);
        release_unit(s, u, 0);
    }
}

// Every rank keeps every row's parameters; rank 0 alone writes them, with their
// AdamW moments staged from all ranges (a range may cut a row).
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    *rows = resident_stage_rows(&s->resident, &s->model->layout, s->comm, t);
    return 1;
}

// The averaged gradient of this rank's range, less padding: ZeRO-1's other
// elements hold this rank's own, unreduced partial sums.
static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    return resident_grad_spans(&s->resident, 1, spans);
}

// The EMA of this rank's range takes the weights' place (or gives it back),
// and every range goes to everyone, as after a step.
static void swap_ema(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // nothing gathered left to go stale
    resident_swap_ema(&s->resident);
    gather_ranges(s);
}

static void destroy(void *state) {
    State *s = state;
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u, 0);  // what a forward-only pass kept
    resident_free(&s->resident, s->mem);
    free(s->piece_start);
    free(s->reduces);
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
    CHECK(s->stage == 1 || s->stage == 2, "zero12_init: stage %d", s->stage);
    s->accum_mode = s->stage == 1 ? ACCUM_NO_SYNC : ctx->accum_mode;  // ZeRO-1 keeps whole gradients anyway
    resident_init_range(&s->resident, ctx, world, s->comm->rank, s->stage == 1);
    s->piece_start = flat_range_pieces(layout, world);
    s->reduces = xcalloc((size_t)s->piece_start[layout->num_tensors], sizeof(CommHandle));
    for (int t = 0; t < layout->num_tensors; t++) {
        // the model reads and writes the replica directly, for good (ZeRO-2: not its gradients)
        model->params[t] = resident_params(&s->resident, t);
        model->grads[t] = resident_grads(&s->resident, t);
    }
    resident_load_replica(&s->resident, &ctx->source);
    strategy_note(ctx, "zero%d: %d ranges of %zu elements (P = %zu, %zu of padding)\n", s->stage, world,
                  s->resident.state_numel, P, s->resident.params_numel - P);
    return STRATEGY_TABLE(s->stage == 1 ? "zero1" : "zero2", s);
}
