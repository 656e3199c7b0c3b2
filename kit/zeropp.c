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

static QuantFormat grads_format(const StrategyContext *ctx, const char *name, const ZeroppOptions *options) {
    if (!options->quantize_grads) return (QuantFormat){0, 0};
    QuantFormat format = {strcmp(options->quantize_grads, "int4") == 0 ? 4 : 8,
                          options->quantize_block ? options->quantize_block : ZEROPP_DEFAULT_BLOCK};
    strategy_note(ctx, "%s: gradients reduced by an all-to-all of int%d parts, one fp32 scale a block of %zu, "
                       "summed in fp32 (ZeRO++'s qgZ)\n", name, format.bits, format.block);
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
                    const ZeroppOptions *options) {
    int N = sharding->world, H = options->secondary_shard_group;
    *h = (SecondaryShards){0};
    if (H == 0) return;
    split_nodes(ctx, sharding, name, "--secondary-shard-group", H, "the backward's gathers would cross the same links "
                "as without it, and the secondary shards would only hold memory", &h->node);
    h->on = 1;
    h->sharding_world = N;
    h->model = ctx->model;
    h->mem = ctx->mem;
    h->kept = xcalloc((size_t)ctx->model->layout.num_units, sizeof(void *));
    h->kept_numel = xcalloc((size_t)ctx->model->layout.num_units, sizeof(size_t));
    strategy_note(ctx, "%s: secondary shards of 1/%d in nodes of %d rank(s): the backward's gathers stay in the node "
                       "(ZeRO++'s hpZ)\n", name, H, H);
}

void secondary_keep(SecondaryShards *h, int unit, const TensorState *states) {
    if (!h->on) return;
    const GPT2Layout *layout = &h->model->layout;
    DType dtype = h->model->param_dtype;
    int H = h->node.world, j = h->node.rank;
    for (int u = unit == 0 ? 0 : unit; u < (unit == 0 ? layout->num_units : unit + 1); u++)
        secondary_drop(h, u);  // a forward-only pass's (at unit 0, all of them)
    size_t numel = 0, at = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (states[t] == TENSOR_GATHERED) numel += row_slice_padded_numel(&layout->tensors[t], h->sharding_world) / H;
    }
    if (numel == 0) return;
    h->kept[unit] = device_alloc_as(h->mem, MEM_PARAMS_GATHERED, numel, dtype);
    h->kept_numel[unit] = numel;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (states[t] != TENSOR_GATHERED) continue;
        size_t mine = row_slice_padded_numel(&layout->tensors[t], h->sharding_world) / H;  // rows j of H, padded
        device_copy_as(dtype_at(h->kept[unit], at, dtype), dtype_at(h->model->params[t], (size_t)j * mine, dtype), mine,
                       dtype);
        at += mine;
    }
}

Comm *secondary_group(SecondaryShards *h, int unit, int direction, Comm *sharding) {
    return h->on && direction < 0 && h->kept[unit] ? &h->node : sharding;
}

void secondary_pack(SecondaryShards *h, int unit, InFlight *f, const Comm *from) {
    if (from != &h->node) return;
    CHECK(h->kept_numel[unit] == f->send_numel, "unit %d: %zu rows kept for a gather of %zu", unit,
          h->kept_numel[unit], f->send_numel);
    device_copy_as(f->send, h->kept[unit], f->send_numel, f->dtype);
    f->packed = f->send_numel;
    secondary_drop(h, unit);
}

void secondary_drop(SecondaryShards *h, int unit) {
    if (!h->on || !h->kept[unit]) return;
    device_free_as(h->mem, MEM_PARAMS_GATHERED, h->kept[unit], h->kept_numel[unit], h->model->param_dtype);
    h->kept[unit] = NULL;
}

void secondary_free(SecondaryShards *h) {
    if (!h->on) return;
    for (int u = 0; u < h->model->layout.num_units; u++) secondary_drop(h, u);
    comm_free_group(&h->node);
    free(h->kept);
    free(h->kept_numel);
}

// qgZ's two hops: nodes of H consecutive ranks of `sharding`, and the ranks of my place in every node.
static void grads_hops_init(Zeropp *z, const StrategyContext *ctx, Comm *sharding, const char *name,
                            const ZeroppOptions *options) {
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
    strategy_note(ctx, "%s: the gradients' all-to-all in two hops, inside nodes of %d rank(s), then across the %d "
                       "nodes\n", name, H, N / H);
}

void zeropp_init(Zeropp *z, const StrategyContext *ctx, Comm *sharding, const char *name, const ZeroppOptions *options) {
    *z = (Zeropp){.mem = ctx->mem, .wires = xcalloc((size_t)ctx->model->layout.num_tensors, sizeof(void *))};
    z->weights_wire = weights_format(ctx, name, options);
    z->grads_wire.format = grads_format(ctx, name, options);
    grads_hops_init(z, ctx, sharding, name, options);
    secondary_init(&z->secondary, ctx, sharding, name, options);
}

void zeropp_free(Zeropp *z) {
    if (z->grads_wire.node) {
        comm_free_group(&z->grads_node);
        comm_free_group(&z->grads_across);
    }
    secondary_free(&z->secondary);
    free(z->wires);
}

CommHandle zeropp_broadcast_start(Zeropp *z, Comm *comm, int t, int wire, const void *kept, GPT2 *model, int root) {
    size_t numel = model->layout.tensors[t].numel;
    if (!wire) return comm_broadcast_start(comm, model->params[t], numel, model->param_dtype, root);
    size_t bytes = quant_wire_bytes(numel, z->weights_wire);
    z->wires[t] = device_alloc_as(z->mem, MEM_COMM_BUFFERS, bytes, DTYPE_INT8);
    if (comm->rank == root) device_quantize(z->wires[t], kept, numel, model->param_dtype, z->weights_wire);
    return comm_broadcast_start(comm, z->wires[t], bytes, DTYPE_INT8, root);
}

void zeropp_broadcast_finish(Zeropp *z, int t, GPT2 *model) {
    if (!z->wires[t]) return;
    size_t numel = model->layout.tensors[t].numel;
    device_dequantize(model->params[t], z->wires[t], numel, model->param_dtype, z->weights_wire);
    device_free_as(z->mem, MEM_COMM_BUFFERS, z->wires[t], quant_wire_bytes(numel, z->weights_wire), DTYPE_INT8);
    z->wires[t] = NULL;
}
