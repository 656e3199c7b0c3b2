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

void secondary_init(SecondaryShards *h, const StrategyContext *ctx, Comm *sharding, Comm *node, const int *owner,
                    const TensorState *states) {
    int num_units = ctx->model->layout.num_units;
    *h = (SecondaryShards){0};
    if (!node) return;
    h->on = 1;
    h->node = node;
    h->sharding_world = sharding->world;
    h->sharding_rank = sharding->rank;
    h->owner = owner;
    h->model = ctx->model;
    h->mem = ctx->mem;
    h->states = states;
    h->kept = xcalloc((size_t)num_units, sizeof(void *));
    h->kept_numel = xcalloc((size_t)num_units, sizeof(size_t));
    h->taken = xcalloc((size_t)num_units, sizeof(size_t));
}

// The elements of tensor t of the unit this rank keeps for its node: rows j of H of its padded full buffer (j: my
// place in the node), or the whole tensor where its owner's place is mine and the owner is in another node; none
// of a tensor the forward keeps gathered (released_after: the head's, and wte).
static size_t kept_numel(const SecondaryShards *h, int unit, int t) {
    const GPT2Tensor *tensor = &h->model->layout.tensors[t];
    if (!released_after(&h->model->layout, t, unit, +1)) return 0;
    if (!h->owner) return row_slice_padded_numel(tensor, h->sharding_world) / (size_t)h->node->world;
    int o = h->owner[t];
    return o % h->node->world == h->node->rank && o != h->sharding_rank ? tensor->numel : 0;
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
        numel += kept_numel(h, unit, t);
    }
    if (numel == 0) return;
    h->kept[unit] = device_alloc_as(h->mem, MEM_PARAMS_GATHERED, numel, dtype);
    h->kept_numel[unit] = numel;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t mine = kept_numel(h, unit, t);
        if (states[t] != TENSOR_GATHERED || mine == 0) continue;
        size_t first = h->owner ? 0 : (size_t)h->node->rank * mine;  // rows j of H, padded; or all of it
        device_copy_as(dtype_at(h->kept[unit], at, dtype), dtype_at(h->model->params[t], first, dtype), mine, dtype);
        at += mine;
    }
}

// (The tensors' states, not the copies, say where the backward gathers: a rank that kept nothing of a unit
// still gathers it inside its node.)
void secondary_drop(SecondaryShards *h, int unit) {
    if (!h->on) return;
    h->taken[unit] = 0;
    if (!h->kept[unit]) return;
    device_free_as(h->mem, MEM_PARAMS_GATHERED, h->kept[unit], h->kept_numel[unit], h->model->param_dtype);
    h->kept[unit] = NULL;
    h->kept_numel[unit] = 0;
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
    if (h->taken[unit] == h->kept_numel[unit]) secondary_drop(h, unit);
    return 1;
}

Comm *secondary_group(SecondaryShards *h, int unit, int direction, Comm *sharding) {
    if (!h->on) return sharding;  // (h->model is NULL when hpZ is off)
    const GPT2Layout *layout = &h->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++)
        if (h->states[layout->unit_tensors[unit][i]] == TENSOR_SHARDED_POST_FORWARD) {
            // only a training forward leaves a tensor kept in its node, and its backward's gather takes it
            CHECK(direction < 0, "unit %d: tensor %d is still kept in its node at a forward: a pass no backward "
                  "followed left it there", unit, layout->unit_tensors[unit][i]);
            return h->node;
        }
    return sharding;
}

void secondary_pack(SecondaryShards *h, int unit, InFlight *f, const Comm *from) {
    if (from != h->node) return;
    CHECK(h->kept_numel[unit] == f->send_numel, "unit %d: %zu rows kept for a gather of %zu", unit,
          h->kept_numel[unit], f->send_numel);
    device_copy_as(f->send, h->kept[unit], f->send_numel, f->dtype);
    f->packed = f->send_numel;
    f->filled = 1;
    secondary_drop(h, unit);
}

void secondary_free(SecondaryShards *h) {
    if (!h->on) return;
    for (int u = 0; u < h->model->layout.num_units; u++) secondary_drop(h, u);
    free(h->kept);
    free(h->kept_numel);
    free(h->taken);
}


// ---- the quantized legs of a collective (QuantLeg) ----

// The runs of `block` (one rank's elements of `dtype`, f->packed of them) to their wires, one after another.
static void quantize_runs(const InFlight *f, const QuantLeg *q, const void *block, DType dtype, void *wire) {
    size_t at = 0, bytes = 0;
    for (int i = 0; i < f->num_runs; i++) {
        device_quantize((char *)wire + bytes, dtype_at((void *)block, at, dtype), f->runs[i], dtype, q->format);
        at += f->runs[i];
        bytes += quant_wire_bytes(f->runs[i], q->format);
    }
}

static void dequantize_runs(const InFlight *f, const QuantLeg *q, void *block, DType dtype, const void *wire) {
    size_t at = 0, bytes = 0;
    for (int i = 0; i < f->num_runs; i++) {
        device_dequantize(dtype_at(block, at, dtype), (const char *)wire + bytes, f->runs[i], dtype, q->format);
        at += f->runs[i];
        bytes += quant_wire_bytes(f->runs[i], q->format);
    }
}

static void close_leg(void *leg, MemAccount *mem) {
    QuantLeg *q = leg;
    device_free_as(mem, MEM_COMM_BUFFERS, q->wire_send, q->wire_bytes * (size_t)q->wires_out, DTYPE_INT8);
    device_free_as(mem, MEM_COMM_BUFFERS, q->wire_recv, q->wire_bytes * (size_t)q->wires_in, DTYPE_INT8);
    device_free(mem, MEM_COMM_BUFFERS, q->part, q->sum_numel);  // NULL where nothing was summed
    device_free(mem, MEM_COMM_BUFFERS, q->sum, q->sum_numel);
    free(q);
}

// Opens f's leg: the wires of a quantized collective, wire_bytes of my runs, `out` of them to send and `in`
// to receive.
static QuantLeg *open_leg(InFlight *f, Comm *comm, MemAccount *mem, QuantFormat format, int out, int in) {
    CHECK((format.bits == 8 || format.bits == 4) && format.block > 0 && f->num_runs > 0,
          "a collective quantized to %d bits in blocks of %zu, of %d runs", format.bits, format.block, f->num_runs);
    QuantLeg *q = xcalloc(1, sizeof *q);
    q->format = format;
    for (int i = 0; i < f->num_runs; i++) q->wire_bytes += quant_wire_bytes(f->runs[i], format);
    q->wire_send = device_alloc_as(mem, MEM_COMM_BUFFERS, q->wire_bytes * (size_t)out, DTYPE_INT8);
    q->wire_recv = device_alloc_as(mem, MEM_COMM_BUFFERS, q->wire_bytes * (size_t)in, DTYPE_INT8);
    q->wires_out = out;
    q->wires_in = in;
    f->comm = comm;
    f->leg = q;
    f->close_leg = close_leg;
    return q;
}

// qgZ's fp32 part and sum where parts are summed: of the runs of one rank's part.
static void open_sums(const InFlight *f, QuantLeg *q, MemAccount *mem) {
    q->sum_numel = f->packed;
    q->part = device_alloc(mem, MEM_COMM_BUFFERS, f->packed);
    q->sum = device_alloc(mem, MEM_COMM_BUFFERS, f->packed);
}

// qgZ in two hops: my node's ranks, and my place's in every node, must split comm.
static void set_hops(QuantLeg *q, Comm *comm, GradsWire wire) {
    q->node = wire.node;
    q->across = wire.across;
    CHECK(!q->node || (q->node->parent == comm && q->across->parent == comm &&
                       q->node->world * q->across->world == comm->world),
          "a reduce in two hops whose groups are not a split of its %d ranks", comm->world);
}

void qwz_all_gather_start(InFlight *f, Comm *comm, MemAccount *mem, QuantFormat format) {
    CHECK(f->packed == f->send_numel, "a quantized all-gather of %zu elements, %zu packed", f->send_numel, f->packed);
    QuantLeg *q = open_leg(f, comm, mem, format, 1, comm->world);
    quantize_runs(f, q, f->send, f->dtype, q->wire_send);
    f->handle = comm_all_gather_start(comm, q->wire_send, q->wire_recv, q->wire_bytes * (size_t)comm->world, DTYPE_INT8);
}

void qgz_reduce_scatter_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire) {
    CHECK(f->packed == f->recv_numel, "a quantized reduce-scatter of %zu elements a rank, runs of %zu", f->recv_numel,
          f->packed);
    QuantLeg *q = open_leg(f, comm, mem, wire.format, comm->world, comm->world);
    open_sums(f, q, mem);
    set_hops(q, comm, wire);
    // rank p = node·H + place: its block goes first to my node's rank of that place, with the blocks of
    // that place in the other nodes (one hop: H = N, so to rank p itself)
    int H = q->node ? q->node->world : comm->world, nodes = comm->world / H;
    for (int p = 0; p < comm->world; p++)
        quantize_runs(f, q, dtype_at(f->send, (size_t)p * f->recv_numel, f->dtype), f->dtype,
                      (char *)q->wire_send + ((size_t)(p % H) * nodes + p / H) * q->wire_bytes);
    f->handle = comm_all_to_all_start(q->node ? q->node : comm, q->wire_send, q->wire_recv,
                                      q->wire_bytes * (size_t)comm->world, DTYPE_INT8);
}

void qgz_reduce_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire, int root) {
    CHECK(f->recv_numel == (comm->rank == root ? f->send_numel : 0) && f->packed == f->send_numel &&
              wire.format.bits,
          "a quantized reduce of %zu elements (%zu packed) into %zu at rank %d of %d", f->send_numel, f->packed,
          f->recv_numel, root, comm->world);
    // the first gather goes to my node's rank of the root's place (one hop: H = N, to the root), which sums
    // the node's H parts; in two hops the root then gathers and sums the N/H nodes' sums
    int H = wire.node ? wire.node->world : comm->world, place = root % H, nodes = comm->world / H;
    int in = (wire.node ? wire.node->rank : comm->rank) == place ? H : 0;
    if (comm->rank == root && nodes > in) in = nodes;
    QuantLeg *q = open_leg(f, comm, mem, wire.format, 1, in);
    q->root = root;
    set_hops(q, comm, wire);
    if (in) open_sums(f, q, mem);
    quantize_runs(f, q, f->send, f->dtype, q->wire_send);
    f->handle = comm_gather_start(q->node ? q->node : comm, q->wire_send, in ? q->wire_recv : NULL,
                                  q->wire_bytes * (size_t)H, DTYPE_INT8, place);
}

// qwZ's arrival: each rank's wire dequantized into its part of recv.
static void dequantize_gathered(InFlight *f, QuantLeg *q) {
    for (int r = 0; r < f->comm->world; r++)
        dequantize_runs(f, q, dtype_at(f->recv, (size_t)r * f->send_numel, f->dtype), f->dtype,
                        (const char *)q->wire_recv + (size_t)r * q->wire_bytes);
}

// Into q->sum: `count` wires from `first`, `stride` wires apart, dequantized and added in that order in fp32.
static void sum_wires(InFlight *f, QuantLeg *q, int count, const char *first, size_t stride) {
    for (int k = 0; k < count; k++) {
        dequantize_runs(f, q, k == 0 ? q->sum : q->part, DTYPE_FP32, first + (size_t)k * stride * q->wire_bytes);
        if (k > 0) device_add(q->sum, q->part, f->packed);
    }
}

// qgZ's first hop of two has arrived: for each node n, my node's H parts of the block of my place in
// node n, summed in rank order and quantized again; the second hop sends node n its sum.
static void send_across(InFlight *f, QuantLeg *q) {
    int nodes = q->across->world;
    for (int n = 0; n < nodes; n++) {
        sum_wires(f, q, q->node->world, (const char *)q->wire_recv + (size_t)n * q->wire_bytes, (size_t)nodes);
        quantize_runs(f, q, q->sum, DTYPE_FP32, (char *)q->wire_send + (size_t)n * q->wire_bytes);
    }
    f->handle = comm_all_to_all_start(q->across, q->wire_send, q->wire_recv, q->wire_bytes * (size_t)nodes, DTYPE_INT8);
    comm_wait(q->across, &f->handle);
}

// qgZ's reduce to one rank, the first hop of two has arrived: at my node's rank of the root's place, the
// node's H parts summed in rank order and quantized again, gathered at the root from that place's ranks.
static void gather_across(InFlight *f, QuantLeg *q) {
    int nodes = q->across->world, root_node = q->root / q->node->world;
    if (q->node->rank != q->root % q->node->world) return;  // my part has gone
    sum_wires(f, q, q->node->world, q->wire_recv, 1);
    quantize_runs(f, q, q->sum, DTYPE_FP32, q->wire_send);
    f->handle = comm_gather_start(q->across, q->wire_send, q->across->rank == root_node ? q->wire_recv : NULL,
                                  q->wire_bytes * (size_t)nodes, DTYPE_INT8, root_node);
    comm_wait(q->across, &f->handle);
}

// qgZ's arrival: each rank's part of my rows (two hops: each node's sum), dequantized, added in rank
// order in fp32; for COMM_AVG divided by all N, then rounded once to the gradients' dtype.
static void sum_parts(InFlight *f, QuantLeg *q) {
    sum_wires(f, q, q->node ? q->across->world : f->comm->world, q->wire_recv, 1);
    if (f->op == COMM_AVG) device_scale(q->sum, f->packed, 1.0f / (float)f->comm->world);
    if (f->dtype == DTYPE_FP32) device_copy(f->recv, q->sum, f->recv_numel);
    else device_round(f->recv, q->sum, f->recv_numel);
}

void quantized_finish(InFlight *f) {
    QuantLeg *q = f->leg;
    comm_wait(q->node ? q->node : f->comm, &f->handle);
    if (f->handle.op == COMM_ALL_GATHER) dequantize_gathered(f, q);
    if (q->node && f->handle.op == COMM_ALL_TO_ALL) send_across(f, q);
    if (q->node && f->handle.op == COMM_GATHER) gather_across(f, q);
    int summed_here = f->handle.op == COMM_ALL_TO_ALL || (f->handle.op == COMM_GATHER && f->comm->rank == q->root);
    if (summed_here) sum_parts(f, q);
}

void quantize_round_trip(MemAccount *mem, QuantFormat format, void *dst, const void *src, size_t numel, DType dtype) {
    size_t bytes = quant_wire_bytes(numel, format);
    void *wire = device_alloc_as(mem, MEM_COMM_BUFFERS, bytes, DTYPE_INT8);
    device_quantize(wire, src, numel, dtype, format);
    device_dequantize(dst, wire, numel, dtype, format);
    device_free_as(mem, MEM_COMM_BUFFERS, wire, bytes, DTYPE_INT8);
}
