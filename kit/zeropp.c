// zeropp.c: ZeRO++'s flags, read into what the strategy's collectives do.
#include "kit/zeropp.h"

#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "kit/partition.h"
#include "util/errors.h"

const char *zeropp_problem(const ZeroppOptions *options) {
    if (options->quantize_weights && strcmp(options->quantize_weights, "int8") != 0)
        return "--quantize-weights: the parameters can be quantized to int8 only (give --quantize-weights int8)";
    if (options->quantize_grads && strcmp(options->quantize_grads, "int8") != 0 &&
        strcmp(options->quantize_grads, "int4") != 0)
        return "--quantize-grads: the gradients can be quantized to int8 or int4 only (give one of the two)";
    if (options->quantize_grads_node && !options->quantize_grads)
        return "--quantize-grads-node sets the nodes of --quantize-grads's two hops, which is not given: it would do "
               "nothing";
    if (options->quantize_block && !options->quantize_weights && !options->quantize_grads)
        return "--quantize-block sets the blocks of --quantize-weights and --quantize-grads, neither of which is "
               "given: it would do nothing";
    return NULL;
}

static QuantFormat weights_format(const StrategyContext *ctx, const char *name, const ZeroppOptions *options) {
    if (!options->quantize_weights) return (QuantFormat){0, 0};
    QuantFormat format = {8, options->quantize_block ? options->quantize_block : ZEROPP_DEFAULT_BLOCK};
    strategy_note(ctx, "%s: parameters gathered for training as int8, one fp32 scale a block of %zu (ZeRO++'s qwZ)\n",
                  name, format.block);
    return format;
}

// How qgZ's parts travel: to every rank (sliced tensors), or to each tensor's owner (owned whole).
static const char *grads_collective(const int *owner) { return owner ? "a gather at each owner" : "an all-to-all"; }

static QuantFormat grads_format(const StrategyContext *ctx, const char *name, const ZeroppOptions *options,
                                const int *owner) {
    if (!options->quantize_grads) return (QuantFormat){0, 0};
    QuantFormat format = {strcmp(options->quantize_grads, "int4") == 0 ? 4 : 8,
                          options->quantize_block ? options->quantize_block : ZEROPP_DEFAULT_BLOCK};
    strategy_note(ctx, "%s: gradients reduced by %s of int%d parts, one fp32 scale a block of %zu, summed in fp32 "
                       "(ZeRO++'s qgZ)\n", name, grads_collective(owner), format.bits, format.block);
    return format;
}

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

void secondary_init(SecondaryShards *h, const StrategyContext *ctx, Comm *sharding, const char *name,
                    const ZeroppOptions *options, const int *owner) {
    int N = sharding->world, H = options->secondary_shard_group;
    int num_units = ctx->model->layout.num_units;
    *h = (SecondaryShards){0};
    if (H == 0) return;
    split_nodes(ctx, sharding, name, "--secondary-shard-group", H, "the backward's gathers would cross the same links "
                "as without it, and the secondary shards would only hold memory", &h->node);
    h->on = 1;
    h->sharding_world = N;
    h->sharding_rank = sharding->rank;
    h->owner = owner;
    h->model = ctx->model;
    h->mem = ctx->mem;
    h->held = xcalloc((size_t)num_units, sizeof(int));
    h->kept = xcalloc((size_t)num_units, sizeof(void *));
    h->kept_numel = xcalloc((size_t)num_units, sizeof(size_t));
    h->taken = xcalloc((size_t)num_units, sizeof(size_t));
    if (owner)
        strategy_note(ctx, "%s: secondary copies in nodes of %d rank(s), each tensor on the rank of its owner's "
                           "place: the backward's broadcasts stay in the node (ZeRO++'s hpZ)\n", name, H);
    else
        strategy_note(ctx, "%s: secondary shards of 1/%d in nodes of %d rank(s): the backward's gathers stay in the "
                           "node (ZeRO++'s hpZ)\n", name, H, H);
}

// The elements of tensor t of the unit this rank keeps for its node: rows j of H of its padded full buffer (j: my
// place in the node), or the whole tensor where its owner's place is mine and the owner is in another node; none
// of a tensor the forward keeps gathered (released_after: the head's, and wte).
static size_t kept_numel(const SecondaryShards *h, int unit, int t) {
    const GPT2Tensor *tensor = &h->model->layout.tensors[t];
    if (!released_after(&h->model->layout, t, unit, +1)) return 0;
    if (!h->owner) return row_slice_padded_numel(tensor, h->sharding_world) / (size_t)h->node.world;
    int o = h->owner[t];
    return o % h->node.world == h->node.rank && o != h->sharding_rank ? tensor->numel : 0;
}

void secondary_keep(SecondaryShards *h, int unit, const TensorState *states) {
    if (!h->on) return;
    const GPT2Layout *layout = &h->model->layout;
    DType dtype = h->model->param_dtype;
    for (int u = unit == 0 ? 0 : unit; u < (unit == 0 ? layout->num_units : unit + 1); u++)
        secondary_drop(h, u);  // a forward-only pass's (at unit 0, all of them)
    size_t numel = 0, at = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (states[t] != TENSOR_GATHERED || !released_after(layout, t, unit, +1)) continue;
        h->held[unit] = 1;
        numel += kept_numel(h, unit, t);
    }
    if (numel == 0) return;
    h->kept[unit] = device_alloc_as(h->mem, MEM_PARAMS_GATHERED, numel, dtype);
    h->kept_numel[unit] = numel;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t mine = kept_numel(h, unit, t);
        if (states[t] != TENSOR_GATHERED || mine == 0) continue;
        size_t first = h->owner ? 0 : (size_t)h->node.rank * mine;  // rows j of H, padded; or all of it
        device_copy_as(dtype_at(h->kept[unit], at, dtype), dtype_at(h->model->params[t], first, dtype), mine, dtype);
        at += mine;
    }
}

// The unit's copies are freed; the unit stays held until secondary_drop (its backward's other gathers
// must go where every rank of the node sends them).
static void free_kept(SecondaryShards *h, int unit) {
    h->taken[unit] = 0;
    if (!h->kept[unit]) return;
    device_free_as(h->mem, MEM_PARAMS_GATHERED, h->kept[unit], h->kept_numel[unit], h->model->param_dtype);
    h->kept[unit] = NULL;
    h->kept_numel[unit] = 0;
}

void secondary_drop(SecondaryShards *h, int unit) {
    if (!h->on) return;
    h->held[unit] = 0;
    free_kept(h, unit);
}

int secondary_unpack_whole(SecondaryShards *h, int unit, int t, void *dst) {
    const GPT2Layout *layout = &h->model->layout;
    DType dtype = h->model->param_dtype;
    size_t at = 0, numel = kept_numel(h, unit, t);
    if (numel == 0) return 0;
    for (int i = 0; layout->unit_tensors[unit][i] != t; i++) at += kept_numel(h, unit, layout->unit_tensors[unit][i]);
    CHECK(h->kept[unit] && at + numel <= h->kept_numel[unit], "unit %d: tensor %d's secondary copy at %zu + %zu of "
          "%zu kept", unit, t, at, numel, h->kept_numel[unit]);
    device_copy_as(dst, dtype_at(h->kept[unit], at, dtype), numel, dtype);
    h->taken[unit] += numel;
    if (h->taken[unit] == h->kept_numel[unit]) free_kept(h, unit);
    return 1;
}

Comm *secondary_group(SecondaryShards *h, int unit, int direction, Comm *sharding) {
    return h->on && direction < 0 && h->held[unit] ? &h->node : sharding;
}

void secondary_pack(SecondaryShards *h, int unit, InFlight *f, const Comm *from) {
    if (from != &h->node) return;
    CHECK(h->kept_numel[unit] == f->send_numel, "unit %d: %zu rows kept for a gather of %zu", unit,
          h->kept_numel[unit], f->send_numel);
    device_copy_as(f->send, h->kept[unit], f->send_numel, f->dtype);
    f->packed = f->send_numel;
    secondary_drop(h, unit);
}

void secondary_free(SecondaryShards *h) {
    if (!h->on) return;
    for (int u = 0; u < h->model->layout.num_units; u++) secondary_drop(h, u);
    comm_free_group(&h->node);
    free(h->held);
    free(h->kept);
    free(h->kept_numel);
    free(h->taken);
}

// qgZ's two hops: nodes of H consecutive ranks of `sharding`, and the ranks of my place in every node.
static void grads_hops_init(Zeropp *z, const StrategyContext *ctx, Comm *sharding, const char *name,
                            const ZeroppOptions *options, const int *owner) {
    int N = sharding->world, H = options->quantize_grads_node;
    if (H == 0) return;
    if (H == 1)
        fatal("%s: --quantize-grads-node 1 makes a node of each rank: the first hop would move nothing, and the "
              "second quantize the gradients again", name);
    split_nodes(ctx, sharding, name, "--quantize-grads-node", H, "the second hop would only quantize the gradients "
                "again", &z->grads_node);
    comm_split(sharding, sharding->rank % H, H, N / H, 0, &z->grads_across);  // my place in every node: r%H, r%H + H, ...
    z->grads_wire.node = &z->grads_node;
    z->grads_wire.across = &z->grads_across;
    strategy_note(ctx, "%s: %s in two hops, inside nodes of %d rank(s), then across the %d nodes\n", name,
                  grads_collective(owner), H, N / H);
}

void zeropp_init(Zeropp *z, const StrategyContext *ctx, Comm *sharding, const char *name, const ZeroppOptions *options,
                 const int *owner) {
    int num_tensors = ctx->model->layout.num_tensors;
    *z = (Zeropp){.mem = ctx->mem, .wires = xcalloc((size_t)num_tensors, sizeof(void *)),
                  .broadcast_group = xcalloc((size_t)num_tensors, sizeof(Comm *)),
                  .reduces = xcalloc((size_t)num_tensors, sizeof(InFlight))};
    z->weights_wire = weights_format(ctx, name, options);
    z->grads_wire.format = grads_format(ctx, name, options, owner);
    grads_hops_init(z, ctx, sharding, name, options, owner);
    secondary_init(&z->secondary, ctx, sharding, name, options, owner);
}

void zeropp_free(Zeropp *z) {
    if (z->grads_wire.node) {
        comm_free_group(&z->grads_node);
        comm_free_group(&z->grads_across);
    }
    secondary_free(&z->secondary);
    free(z->wires);
    free(z->broadcast_group);
    free(z->reduces);
}

// What the owner of a whole tensor computes with under qwZ where no wire carries it (hpZ's backward, in its
// own node): `src` quantized and dequantized into `dst`, the weights every other rank has.
static void quantize_round_trip(Zeropp *z, void *dst, const void *src, size_t numel, DType dtype) {
    size_t bytes = quant_wire_bytes(numel, z->weights_wire);
    void *wire = device_alloc_as(z->mem, MEM_COMM_BUFFERS, bytes, DTYPE_INT8);
    device_quantize(wire, src, numel, dtype, z->weights_wire);
    device_dequantize(dst, wire, numel, dtype, z->weights_wire);
    device_free_as(z->mem, MEM_COMM_BUFFERS, wire, bytes, DTYPE_INT8);
}

CommHandle zeropp_broadcast_start(Zeropp *z, Comm *comm, int unit, int t, int direction, const void *kept, GPT2 *model,
                                  int root) {
    size_t numel = model->layout.tensors[t].numel;
    Comm *from = secondary_group(&z->secondary, unit, direction, comm);
    z->broadcast_group[t] = comm;
    if (from != comm) {  // hpZ: the rank of the owner's place in my node has it, in full precision
        int place = root % from->world;
        if (from->rank == place && !secondary_unpack_whole(&z->secondary, unit, t, model->params[t]) &&
            z->weights_wire.bits)
            quantize_round_trip(z, model->params[t], kept, numel, model->param_dtype);  // the owner itself
        z->broadcast_group[t] = from;
        return comm_broadcast_start(from, model->params[t], numel, model->param_dtype, place);
    }
    if (!(direction && z->weights_wire.bits))
        return comm_broadcast_start(comm, model->params[t], numel, model->param_dtype, root);
    size_t bytes = quant_wire_bytes(numel, z->weights_wire);
    z->wires[t] = device_alloc_as(z->mem, MEM_COMM_BUFFERS, bytes, DTYPE_INT8);
    if (comm->rank == root) device_quantize(z->wires[t], kept, numel, model->param_dtype, z->weights_wire);
    return comm_broadcast_start(comm, z->wires[t], bytes, DTYPE_INT8, root);
}

int zeropp_broadcast_wait(Zeropp *z, CommHandle *h, int t, GPT2 *model) {
    if (!comm_wait(z->broadcast_group[t], h)) return 0;
    if (!z->wires[t]) return 1;
    size_t numel = model->layout.tensors[t].numel;
    device_dequantize(model->params[t], z->wires[t], numel, model->param_dtype, z->weights_wire);
    device_free_as(z->mem, MEM_COMM_BUFFERS, z->wires[t], quant_wire_bytes(numel, z->weights_wire), DTYPE_INT8);
    z->wires[t] = NULL;
    return 1;
}

CommHandle zeropp_reduce_start(Zeropp *z, Comm *comm, int t, GPT2 *model, int root) {
    size_t numel = model->layout.tensors[t].numel;
    void *local = model->grads[t];
    int is_root = comm->rank == root;
    if (!z->grads_wire.format.bits)
        return comm_reduce_start(comm, local, is_root ? local : NULL, numel, model->grad_dtype, root, COMM_AVG);
    InFlight *f = &z->reduces[t];
    inflight_open(f, z->mem, numel, is_root ? numel : 0, model->grad_dtype);
    inflight_pack(f, local, numel);
    inflight_reduce_start(f, comm, z->mem, z->grads_wire, root);
    return (CommHandle){0};
}

int zeropp_reduce_wait(Zeropp *z, Comm *comm, CommHandle *h, int t, GPT2 *model) {
    InFlight *f = &z->reduces[t];
    if (!f->send) return comm_wait(comm, h);
    inflight_wait(f, comm);
    if (f->recv_numel) device_copy_as(model->grads[t], f->recv, f->recv_numel, model->grad_dtype);
    inflight_close(f, z->mem);
    return 1;
}
