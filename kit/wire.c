// wire.c: how a sharded strategy's collectives travel (wire.h): the options read once into groups and
// formats, and each collective the strategies name sent the way they say.
#include "kit/wire.h"

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "util/errors.h"

const char *wire_problem(const WireOptions *options) { return zeropp_problem(&options->zeropp); }

// ---- the groups: every one a strategy uses is made here ----

// This rank's node among nodes of H consecutive ranks of `sharding`, asked for by `flag` (H divides them
// and is fewer: `all` says what a node of them all would do).
static void split_nodes(const StrategyContext *ctx, Comm *sharding, const char *name, const char *flag, int H,
                        const char *all, Comm *node) {
    int N = sharding->world;
    const char *of = N < ctx->comm->world ? " (a --shard-group)" : "";
    if (H > N || N % H != 0)
        fatal("%s: %s %d does not divide the %d ranks that shard the model%s into nodes", name, flag, H, N, of);
    if (H == N) fatal("%s: %s %d makes one node of all %d ranks that shard the model%s: %s", name, flag, H, N, of, all);
    comm_split(sharding, sharding->rank / H * H, 1, H, 0, node);  // ranks r/H*H, ..., r/H*H + H-1
}

// Hybrid groups of M consecutive ranks (0 or N: one group of all, no replicas); returns the ranks that shard.
static Comm *hybrid_init(Wire *w, const StrategyContext *ctx, const char *name, int shard_group) {
    int N = w->world->world, M = shard_group ? shard_group : N;
    if (M > N || N % M != 0) fatal("%s: --shard-group %d does not divide the %d ranks into equal groups", name, M, N);
    if (M == N) return w->world;
    w->hybrid = 1;  // groups of M consecutive ranks shard; the ranks at the same place in each group replicate
    int r = w->world->rank;
    comm_split(w->world, r / M * M, 1, M, 0, &w->group);   // ranks r/M*M, ..., r/M*M + M-1
    comm_split(w->world, r % M, M, N / M, 1, &w->across);  // ranks r%M, r%M + M, ...
    strategy_note(ctx, "%s: hybrid sharding, %d group(s) of %d rank(s): slices of 1/%d, gradients all-reduced "
                       "across the groups\n", name, N / M, M, M);
    return &w->group;
}

// How qgZ's parts travel: to every rank (sliced tensors), or to each tensor's owner (owned whole).
static const char *grads_collective(const int *owner) { return owner ? "a gather at each owner" : "an all-to-all"; }

static void formats_init(Wire *w, const StrategyContext *ctx, const char *name, const ZeroppOptions *options,
                         const int *owner) {
    size_t block = options->quantize_block ? options->quantize_block : ZEROPP_DEFAULT_BLOCK;
    if (options->quantize_weights) {
        w->weights = (QuantFormat){8, block};
        strategy_note(ctx, "%s: parameters gathered for training as int8, one fp32 scale a block of %zu (ZeRO++'s "
                           "qwZ)\n", name, block);
    }
    if (options->quantize_grads) {
        w->grads.format = (QuantFormat){strcmp(options->quantize_grads, "int4") == 0 ? 4 : 8, block};
        strategy_note(ctx, "%s: gradients reduced by %s of int%d parts, one fp32 scale a block of %zu, summed in "
                           "fp32 (ZeRO++'s qgZ)\n", name, grads_collective(owner), w->grads.format.bits, block);
    }
}

// qgZ's two hops: nodes of H consecutive ranks of the sharding ranks, and the ranks of my place in every node.
static void grads_hops_init(Wire *w, const StrategyContext *ctx, const char *name, const ZeroppOptions *options,
                            const int *owner) {
    int N = w->comm->world, H = options->quantize_grads_node;
    if (H == 0) return;
    if (H == 1)
        fatal("%s: --quantize-grads-node 1 makes a node of each rank: the first hop would move nothing, and the "
              "second quantize the gradients again", name);
    split_nodes(ctx, w->comm, name, "--quantize-grads-node", H, "the second hop would only quantize the gradients "
                "again", &w->grads_node);
    comm_split(w->comm, w->comm->rank % H, H, N / H, 0, &w->grads_across);  // my place in every node: r%H, r%H + H, ...
    w->grads.node = &w->grads_node;
    w->grads.across = &w->grads_across;
    strategy_note(ctx, "%s: %s in two hops, inside nodes of %d rank(s), then across the %d nodes\n", name,
                  grads_collective(owner), H, N / H);
}

// hpZ's node of H consecutive ranks of the sharding ranks, and its secondary copies.
static void secondary_node_init(Wire *w, const StrategyContext *ctx, const char *name, const ZeroppOptions *options,
                                const int *owner, const TensorState *states) {
    int H = options->secondary_shard_group;
    if (H == 0) {
        secondary_init(&w->secondary, ctx, w->comm, NULL, owner, states);
        return;
    }
    split_nodes(ctx, w->comm, name, "--secondary-shard-group", H, "the backward's gathers would cross the same links "
                "as without it, and the secondary shards would only hold memory", &w->node);
    secondary_init(&w->secondary, ctx, w->comm, &w->node, owner, states);
    if (owner)
        strategy_note(ctx, "%s: secondary copies in nodes of %d rank(s), each tensor on the rank of its owner's "
                           "place: the backward's broadcasts stay in the node (ZeRO++'s hpZ)\n", name, H);
    else
        strategy_note(ctx, "%s: secondary shards of 1/%d in nodes of %d rank(s): the backward's gathers stay in the "
                           "node (ZeRO++'s hpZ)\n", name, H, H);
}

// With every tensor kept whole (--shard-min-numel above the largest), nothing is sliced: the options that
// change how slices travel would do nothing, and are refused as every flag that would do nothing is.
static void refuse_idle_options(const StrategyContext *ctx, const char *name, const WireOptions *options,
                                const TensorState *states) {
    const GPT2Layout *layout = &ctx->model->layout;
    size_t largest = 0;
    for (int t = 0; t < layout->num_tensors; t++) {
        if (states[t] != TENSOR_REPLICATED) return;
        if (layout->tensors[t].numel > largest) largest = layout->tensors[t].numel;
    }
    const ZeroppOptions *z = &options->zeropp;
    const char *idle = z->quantize_weights ? "--quantize-weights" : z->quantize_grads ? "--quantize-grads"
                       : z->secondary_shard_group ? "--secondary-shard-group"
                       : options->shard_group && options->shard_group < ctx->comm->world ? "--shard-group" : NULL;
    if (idle)
        fatal("%s: --shard-min-numel %llu keeps every tensor whole (the largest has %zu elements): %s changes how "
              "slices travel, and there are none; it would do nothing", name,
              (unsigned long long)options->shard_min_numel, largest, idle);
}

Comm *wire_init(Wire *w, const StrategyContext *ctx, const char *name, const WireOptions *options, const int *owner,
                TensorState *states) {
    const GPT2Layout *layout = &ctx->model->layout;
    *w = (Wire){.model = ctx->model, .mem = ctx->mem, .world = ctx->comm,
                .whole_reduces = xcalloc((size_t)layout->num_units, sizeof(CommHandle)),
                .wires = xcalloc((size_t)layout->num_tensors, sizeof(void *)),
                .broadcast_group = xcalloc((size_t)layout->num_tensors, sizeof(Comm *)),
                .reduces = xcalloc((size_t)layout->num_tensors, sizeof(InFlight))};
    if (!owner) {  // sliced tensors: the small ones may be kept whole
        w->whole = &w->replicas;
        replicas_init(w->whole, ctx, options->shard_min_numel, states);
        refuse_idle_options(ctx, name, options, states);
    }
    w->comm = hybrid_init(w, ctx, name, options->shard_group);
    formats_init(w, ctx, name, &options->zeropp, owner);
    grads_hops_init(w, ctx, name, &options->zeropp, owner);
    secondary_node_init(w, ctx, name, &options->zeropp, owner, states);
    return w->comm;
}

void wire_free(Wire *w) {
    secondary_free(&w->secondary);
    if (w->secondary.node) comm_free_group(&w->node);
    if (w->grads.node) {
        comm_free_group(&w->grads_node);
        comm_free_group(&w->grads_across);
    }
    if (w->hybrid) {
        comm_free_group(&w->group);
        comm_free_group(&w->across);
    }
    if (w->whole) replicas_free(w->whole);
    free(w->whole_reduces);
    free(w->wires);
    free(w->broadcast_group);
    free(w->reduces);
}

int wire_first_group(const Wire *w) { return !w->hybrid || w->across.rank == 0; }

TensorState wire_released(const Wire *w, int direction) {
    return w->secondary.on && direction > 0 ? TENSOR_SHARDED_POST_FORWARD : TENSOR_SHARDED;
}

void wire_join_whole(Wire *w, Resident *part) { replicas_join(w->whole, part); }

int wire_whole_rows(Wire *w, int t, LocalRows *rows) { return w->whole && replicas_rows(w->whole, t, rows); }

// ---- FSDP's ----

void wire_all_gather_open(Wire *w, InFlight *f, int unit, int direction, size_t pack, DType dtype) {
    if (pack == 0) return;
    Comm *from = secondary_group(&w->secondary, unit, direction, w->comm);
    size_t parts = (size_t)(w->comm->world / from->world);  // hpZ: a node rank sends H's worth of slices
    inflight_open(f, w->mem, pack * parts, pack * parts * (size_t)from->world, dtype);
    f->comm = from;
    secondary_pack(&w->secondary, unit, f, from);
}

void wire_all_gather_start(Wire *w, InFlight *f, int direction) {
    if (!f->send || f->handle.active) return;  // nothing opened (pack 0), or already on its way
    CHECK(f->recv_numel == f->send_numel * (size_t)f->comm->world, "an all-gather of %zu elements a rank into %zu",
          f->send_numel, f->recv_numel);
    if (f->comm == w->comm && direction && w->weights.bits) qwz_all_gather_start(f, f->comm, w->mem, w->weights);
    else f->handle = comm_all_gather_start(f->comm, f->send, f->recv, f->recv_numel, f->dtype);
}

int wire_all_gather_finish(Wire *w, InFlight *f) {
    (void)w;
    if (!f->send) return 0;
    if (f->leg) quantized_finish(f);
    else comm_wait(f->comm, &f->handle);
    return 1;
}

void wire_reduce_scatter_start(Wire *w, InFlight *f, int unit, CommReduceOp op) {
    size_t count;
    void *bucket = w->whole ? resident_unit_grads(&w->whole->resident, unit, &count) : NULL;
    if (bucket && count > 0)  // the whole tensors at home in the unit, side by side (DDP's bucket)
        w->whole_reduces[unit] = comm_all_reduce_start(w->world, bucket, count, w->model->grad_dtype, op);
    if (!f->send) return;
    CHECK(f->send_numel == f->recv_numel * (size_t)w->comm->world, "a reduce-scatter of %zu elements into %zu a rank",
          f->send_numel, f->recv_numel);
    f->comm = w->comm;
    f->op = op;
    if (w->grads.format.bits) qgz_reduce_scatter_start(f, w->comm, w->mem, w->grads);
    else f->handle = comm_reduce_scatter_start(w->comm, f->send, f->recv, f->send_numel, f->dtype, op);
}

int wire_reduce_scatter_finish(Wire *w, InFlight *f, int unit) {
    if (w->whole) {
        comm_wait(w->world, &w->whole_reduces[unit]);
        resident_unit_final(&w->whole->resident, unit);
    }
    if (!f->send) return 0;
    if (f->leg) quantized_finish(f);
    else comm_wait(f->comm, &f->handle);
    if (w->hybrid) comm_all_reduce(&w->across, f->recv, f->recv_numel, f->dtype, f->op);  // blocking, across groups
    return 1;
}

// ---- ZeRO-3's ----

CommHandle wire_broadcast_start(Wire *w, int unit, int t, int direction, int root) {
    GPT2 *model = w->model;
    size_t numel = model->layout.tensors[t].numel;
    Comm *comm = w->comm, *from = secondary_group(&w->secondary, unit, direction, comm);
    int quantized = direction && w->weights.bits;
    const void *kept = model->params[t];  // the owner's resident copy
    if (comm->rank == root && quantized) alloc_full_params(model, w->mem, t, 1);  // the owner computes with the wire's
    w->broadcast_group[t] = comm;
    if (from != comm) {  // hpZ: the rank of the owner's place in my node has it, in full precision
        int place = root % from->world;
        if (from->rank == place && !secondary_unpack_whole(&w->secondary, unit, t, model->params[t]) && quantized)
            quantize_round_trip(w->mem, w->weights, model->params[t], kept, numel, model->param_dtype);  // the owner
        w->broadcast_group[t] = from;
        return comm_broadcast_start(from, model->params[t], numel, model->param_dtype, place);
    }
    if (!quantized) return comm_broadcast_start(comm, model->params[t], numel, model->param_dtype, root);
    size_t bytes = quant_wire_bytes(numel, w->weights);
    w->wires[t] = device_alloc_as(w->mem, MEM_COMM_BUFFERS, bytes, DTYPE_INT8);
    if (comm->rank == root) device_quantize(w->wires[t], kept, numel, model->param_dtype, w->weights);
    return comm_broadcast_start(comm, w->wires[t], bytes, DTYPE_INT8, root);
}

int wire_broadcast_finish(Wire *w, CommHandle *h, int t) {
    if (!comm_wait(w->broadcast_group[t], h)) return 0;
    if (!w->wires[t]) return 1;
    GPT2 *model = w->model;
    size_t numel = model->layout.tensors[t].numel;
    device_dequantize(model->params[t], w->wires[t], numel, model->param_dtype, w->weights);
    device_free_as(w->mem, MEM_COMM_BUFFERS, w->wires[t], quant_wire_bytes(numel, w->weights), DTYPE_INT8);
    w->wires[t] = NULL;
    return 1;
}

CommHandle wire_reduce_start(Wire *w, int t, int root, CommReduceOp op) {
    GPT2 *model = w->model;
    size_t numel = model->layout.tensors[t].numel;
    void *local = model->grads[t];
    int is_root = w->comm->rank == root;
    if (!w->grads.format.bits)
        return comm_reduce_start(w->comm, local, is_root ? local : NULL, numel, model->grad_dtype, root, op);
    InFlight *f = &w->reduces[t];
    inflight_open(f, w->mem, numel, is_root ? numel : 0, model->grad_dtype);
    inflight_pack(f, local, numel);
    f->op = op;
    qgz_reduce_start(f, w->comm, w->mem, w->grads, root);
    return (CommHandle){0};
}

int wire_reduce_finish(Wire *w, CommHandle *h, int t) {
    InFlight *f = &w->reduces[t];
    if (!f->send) return comm_wait(w->comm, h);
    quantized_finish(f);
    if (f->recv_numel) device_copy_as(w->model->grads[t], f->recv, f->recv_numel, w->model->grad_dtype);
    inflight_close(f, w->mem);
    return 1;
}

// ---- both ----

void wire_unit_gathered(Wire *w, int unit, int direction, const TensorState *states) {
    if (direction > 0) secondary_keep(&w->secondary, unit, states);
}
