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
// With --prefetch K the next K units' all-gathers are started before unit u
// computes, and unit u's reduce-scatter is waited for only after the next
// unit's backward: the same collectives, travelling under compute.
//
// Hybrid sharding (--shard-group S, FSDP's HYBRID_SHARD): all of the above
// happens within groups of S consecutive ranks (N = S here), and after its
// reduce-scatter each slice's average is all-reduced with the same slice of
// the other N/S groups: slow links carry only that all-reduce.
//
//   group 0: ranks 0..S-1  | group 1: ranks S..2S-1 | ...   slice r of group g ==
//   rank r of each group: all-reduce(avg) of its slices across the groups
//
// Per rank: 16 bytes per parameter / S (padded to S). Across groups per step:
// one all-reduce of each unit's slices, 2 (G-1)/G * 4 pad(P)/S (plus wte's
// second) with G = N/S groups; within a group, FSDP's traffic at S ranks.
//
// Per rank: 16 bytes per parameter / N (padded). Per step: two all-gathers and one
// reduce-scatter of pad(P), plus wte once more in each for its second use (the
// head); one all-gather fewer when not resharding after forward. With K
// micro-batches, the all-gathers happen K times, and so do the reduce-scatters
// (sync-each), or they happen once while 4 pad(P) bytes of full gradients wait (no-sync).
// --precision bf16 (docs/precision.md): parameters and gradients are 2 bytes
// where they are kept and moved (gradients 4 with --reduce-dtype fp32), and an
// fp32 master joins the AdamW state: 2 + 2 + 12 bytes per parameter, and half
// the bytes on the wire.
#include <stdlib.h>

#include "../common/device.h"
#include "../common/util/errors.h"
#include "../common/resident.h"
#include "fsdp.h"

// One unit's collective in flight, with its copy-in/copy-out buffers.
typedef struct {
    CommHandle handle;
    void *send, *recv;   // NULL when nothing is in flight
    size_t pack;         // elements of one rank's part
} InFlight;

typedef struct {
    GPT2 *model;
    Comm *comm;                      // the ranks that shard the model: all N, or this rank's --shard-group
    Comm *world;                     // all N ranks
    int hybrid;                      // --shard-group S < N: the groups below exist
    Comm shard_group;                // the S consecutive ranks this one shards with (comm points here)
    Comm replicas;                   // the N/S ranks, one per group, that hold the same slices
    MemAccount *mem;
    int reshard_after_forward;
    int prefetch;                    // units ahead whose all-gather starts before they run
    InFlight *gathers, *reduces;     // (num_units) each unit's all-gather, reduce-scatter in flight
    Resident resident;               // this rank's slice of every tensor: resident.flat.count[t]
                                     // elements of tensor t (fsdp_slice_numel), padding included
    TensorState *tensor_state;       // (num_tensors) GATHERED while model->params[t] is the full tensor
    AccumMode accum_mode;            // with micro-batches: reduce each one, or keep full gradients until the last
} State;

// Rows of tensor t that hold real data in this rank's slice (the rest is padding).
static int real_rows(const State *s, int t, int *first) {
    const GPT2Tensor *tensor = &s->model->layout.tensors[t];
    int k = fsdp_slice_rows(tensor, s->comm->world);
    *first = s->comm->rank * k;
    return *first >= tensor->rows ? 0 : (*first + k > tensor->rows ? tensor->rows - *first : k);
}

// Elements of one rank's slices of the unit's tensors (sharded_only: of those
// neither here nor on their way).
static size_t unit_slice_numel(const State *s, int unit, int sharded_only) {
    const GPT2Layout *layout = &s->model->layout;
    size_t numel = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!sharded_only || s->tensor_state[t] == TENSOR_SHARDED) numel += s->resident.flat.count[t];
    }
    return numel;
}

// Copy-in for the all-gather: my slice of each sharded tensor of the unit, one
// after another; they are on their way from now on.
static void pack_slices(State *s, int unit, void *send) {
    const GPT2Layout *layout = &s->model->layout;
    const FlatLayout *flat = &s->resident.flat;
    DType dtype = s->model->param_dtype;
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_SHARDED) continue;
        device_copy_as(dtype_at(send, at, dtype), resident_params(&s->resident, t), flat->count[t], dtype);
        s->tensor_state[t] = TENSOR_GATHERING;
        at += flat->count[t];
    }
}

// Copy-out: recv holds rank 0's pack, then rank 1's, ... (`pack` elements each);
// slice r of tensor t goes to rows [r*k, (r+1)*k) of a new full buffer.
static void unpack_full_tensors(State *s, int unit, void *recv, size_t pack) {
    const GPT2Layout *layout = &s->model->layout;
    int world = s->comm->world;
    DType dtype = s->model->param_dtype;
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERING) continue;
        size_t slice = s->resident.flat.count[t];
        void *full = device_alloc_as(s->mem, MEM_PARAMS_GATHERED, slice * world, dtype);
        for (int r = 0; r < world; r++)
            device_copy_as(dtype_at(full, r * slice, dtype), dtype_at(recv, r * pack + at, dtype), slice, dtype);
        s->model->params[t] = full;
        s->tensor_state[t] = TENSOR_GATHERED;
        at += slice;
    }
}

// Starts one all-gather for every tensor of the unit neither here nor on its way.
static void start_gather(State *s, int unit) {
    InFlight *g = &s->gathers[unit];
    DType dtype = s->model->param_dtype;
    size_t pack = unit_slice_numel(s, unit, 1);
    if (pack == 0) return;
    CHECK(!g->send, "fsdp: unit %d's all-gather started twice", unit);
    g->pack = pack;
    g->send = device_alloc_as(s->mem, MEM_COMM_BUFFERS, pack, dtype);
    g->recv = device_alloc_as(s->mem, MEM_COMM_BUFFERS, pack * s->comm->world, dtype);
    pack_slices(s, unit, g->send);
    g->handle = comm_all_gather_start(s->comm, g->send, g->recv, pack * s->comm->world, dtype);
}

// Waits for the unit's all-gather, if one is in flight, and unpacks it.
static void finish_gather(State *s, int unit) {
    InFlight *g = &s->gathers[unit];
    if (!g->send) return;
    comm_wait(s->comm, &g->handle);
    unpack_full_tensors(s, unit, g->recv, g->pack);
    device_free_as(s->mem, MEM_COMM_BUFFERS, g->send, g->pack, s->model->param_dtype);
    device_free_as(s->mem, MEM_COMM_BUFFERS, g->recv, g->pack * s->comm->world, s->model->param_dtype);
    g->send = g->recv = NULL;
}

// The unit's parameters, whole, now; and the all-gathers of the next `prefetch`
// units in `direction` (+1 forward, -1 backward) started behind it, so that
// they travel while this unit computes.
static void gather_unit(State *s, int unit, int direction) {
    start_gather(s, unit);
    for (int k = 1; k <= s->prefetch; k++) {
        int ahead = unit + direction * k;
        if (ahead >= 0 && ahead < s->model->layout.num_units) start_gather(s, ahead);
    }
    finish_gather(s, unit);
}

static void release_unit(State *s, int unit) {
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (s->tensor_state[t] != TENSOR_GATHERED) continue;
        device_free_as(s->mem, MEM_PARAMS_GATHERED, s->model->params[t], s->resident.flat.count[t] * s->comm->world,
                       s->model->param_dtype);
        s->model->params[t] = NULL;
        s->tensor_state[t] = TENSOR_SHARDED;
    }
}

// Copy-in for the reduce-scatter: block r of send holds rank r's rows of every
// gradient of the unit, so that block r, reduced, lands on rank r.
static void pack_grads_by_rank(State *s, int unit, void *send, size_t pack) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->resident.flat.count[t];
        for (int r = 0; r < s->comm->world; r++)
            device_copy_as(dtype_at(send, r * pack + at, dtype), dtype_at(s->model->grads[t], r * slice, dtype), slice,
                           dtype);
        at += slice;
    }
}

// Copy-out: add the averaged slices to my resident gradient (the tied wte
// arrives twice: from the head and from unit 0) and free the full gradients.
static void add_reduced_slices(State *s, int unit, void *recv) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    for (size_t i = 0, at = 0; i < (size_t)layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t slice = s->resident.flat.count[t];
        device_add_as(resident_grads(&s->resident, t), dtype_at(recv, at, dtype), slice, dtype);
        device_free_as(s->mem, MEM_GRADS_GATHERED, s->model->grads[t], slice * s->comm->world, dtype);
        s->model->grads[t] = NULL;
        at += slice;
    }
}

// Starts one reduce-scatter for all of the unit's gradients.
static void start_reduce(State *s, int unit) {
    InFlight *r = &s->reduces[unit];
    int world = s->comm->world;
    DType dtype = s->model->grad_dtype;
    CHECK(!r->send, "fsdp: unit %d's reduce-scatter started twice", unit);
    r->pack = unit_slice_numel(s, unit, 0);
    r->send = device_alloc_as(s->mem, MEM_COMM_BUFFERS, r->pack * world, dtype);
    r->recv = device_alloc_as(s->mem, MEM_COMM_BUFFERS, r->pack, dtype);
    pack_grads_by_rank(s, unit, r->send, r->pack);
    r->handle = comm_reduce_scatter_start(s->comm, r->send, r->recv, r->pack * world, dtype, COMM_AVG);
}

// Waits for the unit's reduce-scatter, if one is in flight, and keeps my slices;
// hybrid: first averages them with the other groups' same slices.
static void finish_reduce(State *s, int unit) {
    InFlight *r = &s->reduces[unit];
    if (!r->send) return;
    comm_wait(s->comm, &r->handle);
    if (s->hybrid) comm_all_reduce(&s->replicas, r->recv, r->pack, s->model->grad_dtype, COMM_AVG);
    add_reduced_slices(s, unit, r->recv);
    device_free_as(s->mem, MEM_COMM_BUFFERS, r->send, r->pack * s->comm->world, s->model->grad_dtype);
    device_free_as(s->mem, MEM_COMM_BUFFERS, r->recv, r->pack, s->model->grad_dtype);
    r->send = r->recv = NULL;
}

static void before_forward(void *state, int unit) { gather_unit(state, unit, +1); }

static void after_forward(void *state, int unit) {
    State *s = state;
    if (s->reshard_after_forward) release_unit(s, unit);
}

// Gather again where released, and give the unit zeroed full-size (padded)
// gradient buffers (or the ones an earlier micro-batch kept, without a reduce,
// to add into).
static void before_backward(void *state, int unit) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    gather_unit(s, unit, -1);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!s->model->grads[t])
            s->model->grads[t] = device_alloc_as(s->mem, MEM_GRADS_GATHERED, s->resident.flat.count[t] * s->comm->world,
                                                 s->model->grad_dtype);
    }
}

// Reduce the unit's gradients: with prefetch, behind the next unit's backward
// (waited for after it), else at once. no_sync keeps every full gradient until
// the last micro-batch, then reduces once.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (last_micro_batch || s->accum_mode == ACCUM_SYNC_EACH) {
        start_reduce(s, unit);
        if (s->prefetch == 0) finish_reduce(s, unit);
        if (unit + 1 < s->model->layout.num_units) finish_reduce(s, unit + 1);
        // the next micro-batch's head must find no gradient still on its way
        if (unit == 0 && !last_micro_batch) finish_reduce(s, 0);
    }
    release_unit(s, unit);
}

// Unit 0's reduce-scatter may still be in flight.
static void finish_grads(void *state) { finish_reduce(state, 0); }

static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

// Unit by unit: gather, let rank 0 copy what is at home in the unit (without
// the padding rows), release.
static void gather_full_model(void *state, float *flat) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int u = 0; u < layout->num_units; u++) {
        start_gather(s, u);
        finish_gather(s, u);
        for (int t = 0; t < layout->num_tensors; t++)
            if (s->world->rank == 0 && layout->tensors[t].home_unit == u)
                device_to_host_widened(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel,
                                       s->model->param_dtype);
        release_unit(s, u);
    }
}

// Rank r keeps rows [r*k, (r+1)*k) of every tensor, less the padding rows
// (r: its rank in its shard group; the first group writes them).
static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    int first, count = real_rows(s, t, &first);
    if (count == 0) return 0;
    *rows = resident_rows(&s->resident, t, first, count, !s->hybrid || s->replicas.rank == 0);
    return 1;
}

// This rank's slices, padding rows (zero) included; the first group's are the
// share of the norm (every group holds the same).
static int local_grads(void *state, void **grads, size_t *count) {
    State *s = state;
    *grads = s->resident.grads;
    *count = s->resident.flat.total;
    return !s->hybrid || s->replicas.rank == 0;
}

static void destroy(void *state) {
    State *s = state;
    // without resharding, a forward-only pass (evaluation) leaves its units gathered
    for (int u = 0; u < s->model->layout.num_units; u++) release_unit(s, u);
    resident_free(&s->resident, s->mem);
    if (s->hybrid) {
        comm_free_group(&s->shard_group);
        comm_free_group(&s->replicas);
    }
    free(s->tensor_state);
    free(s->gathers);
    free(s->reduces);
    free(s);
}

Strategy fsdp_init(const StrategyContext *ctx) {
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->world = s->comm = ctx->comm;
    s->mem = ctx->mem;
    const FsdpOptions *options = ctx->options;
    int N = s->world->world, S = options->shard_group ? options->shard_group : N;
    if (S > N || N % S != 0) fatal("fsdp: --shard-group %d does not divide the %d ranks into equal groups", S, N);
    if (S < N) {  // groups of S consecutive ranks shard; the ranks at the same place in each group replicate
        s->hybrid = 1;
        comm_split(s->world, s->world->rank / S, s->world->rank, 0, &s->shard_group);
        comm_split(s->world, s->world->rank % S, s->world->rank, 1, &s->replicas);
        s->comm = &s->shard_group;
        strategy_note(ctx, "fsdp: hybrid sharding, %d group(s) of %d rank(s): slices of 1/%d, gradients all-reduced "
                      "across the groups\n", N / S, S, S);
    }
    s->reshard_after_forward = options->reshard_after_forward;
    s->prefetch = prefetch_window(layout, options->prefetch);
    if (s->prefetch < options->prefetch)
        strategy_note(ctx, "fsdp: --prefetch %d reaches past the model's L = %d blocks: prefetching %d unit(s) ahead\n",
                      options->prefetch, layout->num_units - 2, s->prefetch);
    s->gathers = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->reduces = xcalloc((size_t)layout->num_units, sizeof(InFlight));
    s->accum_mode = ctx->accum_mode;
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = fsdp_slice_numel(&layout->tensors[t], s->comm->world);
    resident_init(&s->resident, model, count, s->mem);
    free(count);
    s->tensor_state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState));  // all TENSOR_SHARDED
    for (int t = 0; t < layout->num_tensors; t++) {
        // each rank makes its own rows; rows past the end (padding) stay zero
        int first, rows = real_rows(s, t, &first);
        if (rows > 0) resident_load_rows(&s->resident, layout, &ctx->source, t, first, rows);
    }
    return STRATEGY_TABLE("fsdp", s);
}
