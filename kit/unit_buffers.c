#include "kit/unit_buffers.h"

#include <stdlib.h>

#include "device/device.h"
#include "kit/partition.h"
#include "util/errors.h"

static size_t full_numel(const GPT2 *model, int t, int rows_multiple) {
    return row_slice_padded_numel(&model->layout.tensors[t], rows_multiple);
}

void alloc_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    model->params[t] = device_alloc_overwritten_as(mem, MEM_PARAMS_GATHERED, full_numel(model, t, rows_multiple),
                                                   model->param_dtype);  // the gather fills every row
}

void free_full_params(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    device_free_as(mem, MEM_PARAMS_GATHERED, model->params[t], full_numel(model, t, rows_multiple), model->param_dtype);
    model->params[t] = NULL;
}

void alloc_unit_grads(GPT2 *model, MemAccount *mem, int unit, int rows_multiple) {
    const GPT2Layout *layout = &model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!model->grads[t])
            model->grads[t] = device_alloc_as(mem, MEM_GRADS_GATHERED, full_numel(model, t, rows_multiple),
                                              model->grad_dtype);
    }
}

void free_full_grads(GPT2 *model, MemAccount *mem, int t, int rows_multiple) {
    device_free_as(mem, MEM_GRADS_GATHERED, model->grads[t], full_numel(model, t, rows_multiple), model->grad_dtype);
    model->grads[t] = NULL;
}

void inflight_open(InFlight *f, MemAccount *mem, size_t send_numel, size_t recv_numel, DType dtype) {
    CHECK(!f->send, "a collective started on a unit's buffers while the last one on them (%s) is open: wait for it "
          "(inflight_wait) and close its buffers (inflight_close), in the unit's finish_gather or finish_reduce, first",
          f->handle.active ? comm_op_names[f->handle.op] : "already waited for, not closed");
    f->send_numel = send_numel;
    f->recv_numel = recv_numel;
    f->dtype = dtype;
    f->send = device_alloc_overwritten_as(mem, MEM_COMM_BUFFERS, send_numel, dtype);  // packed whole
    f->recv = device_alloc_overwritten_as(mem, MEM_COMM_BUFFERS, recv_numel, dtype);  // the collective's output
    f->packed = 0;
    f->num_runs = 0;
    f->format = (QuantFormat){0, 0};
    f->comm = NULL;  // set by the inflight_*_start that starts its collective
    f->node = f->across = NULL;
}

void inflight_run(InFlight *f, size_t count) {
    f->runs = xrealloc(f->runs, (size_t)(f->num_runs + 1) * sizeof *f->runs);
    f->runs[f->num_runs++] = count;
    f->packed += count;
}

void inflight_pack(InFlight *f, const void *src, size_t count) {
    CHECK(f->packed + count <= f->send_numel, "packing %zu elements after %zu into a send buffer of %zu", count,
          f->packed, f->send_numel);
    device_copy_as(dtype_at(f->send, f->packed, f->dtype), src, count, f->dtype);
    inflight_run(f, count);
}

// The runs of `block` (one rank's elements of `dtype`, f->packed of them) to their wires, one after another.
static void quantize_runs(InFlight *f, const void *block, DType dtype, void *wire) {
    size_t at = 0, bytes = 0;
    for (int i = 0; i < f->num_runs; i++) {
        device_quantize((char *)wire + bytes, dtype_at((void *)block, at, dtype), f->runs[i], dtype, f->format);
        at += f->runs[i];
        bytes += quant_wire_bytes(f->runs[i], f->format);
    }
}

static void dequantize_runs(InFlight *f, void *block, DType dtype, const void *wire) {
    size_t at = 0, bytes = 0;
    for (int i = 0; i < f->num_runs; i++) {
        device_dequantize(dtype_at(block, at, dtype), (const char *)wire + bytes, f->runs[i], dtype, f->format);
        at += f->runs[i];
        bytes += quant_wire_bytes(f->runs[i], f->format);
    }
}

// Allocates the wires of a quantized collective: wire_bytes of my runs, `out` of them to send and `in` to
// receive.
static void open_wires(InFlight *f, MemAccount *mem, QuantFormat format, int out, int in) {
    CHECK((format.bits == 8 || format.bits == 4) && format.block > 0 && f->num_runs > 0,
          "a collective quantized to %d bits in blocks of %zu, of %d runs", format.bits, format.block, f->num_runs);
    f->format = format;
    f->wire_bytes = 0;
    for (int i = 0; i < f->num_runs; i++) f->wire_bytes += quant_wire_bytes(f->runs[i], format);
    f->wire_send = device_alloc_as(mem, MEM_COMM_BUFFERS, f->wire_bytes * (size_t)out, DTYPE_INT8);
    f->wire_recv = device_alloc_as(mem, MEM_COMM_BUFFERS, f->wire_bytes * (size_t)in, DTYPE_INT8);
    f->wires_in = in;
}

// qgZ's fp32 part and sum where parts are summed: of the runs of one rank's part.
static void open_sums(InFlight *f, MemAccount *mem) {
    f->part = device_alloc(mem, MEM_COMM_BUFFERS, f->packed);
    f->sum = device_alloc(mem, MEM_COMM_BUFFERS, f->packed);
}

// qgZ in two hops: my node's ranks, and my place's in every node, must split comm.
static void set_hops(InFlight *f, Comm *comm, GradsWire wire) {
    f->node = wire.node;
    f->across = wire.across;
    CHECK(!f->node || (f->node->parent == comm && f->across->parent == comm &&
                       f->node->world * f->across->world == comm->world),
          "a reduce in two hops whose groups are not a split of its %d ranks", comm->world);
}

void inflight_all_gather_start(InFlight *f, Comm *comm, MemAccount *mem, QuantFormat format) {
    CHECK(f->recv_numel == f->send_numel * (size_t)comm->world, "an all-gather of %zu elements a rank into %zu",
          f->send_numel, f->recv_numel);
    f->comm = comm;
    if (format.bits == 0) {
        f->handle = comm_all_gather_start(comm, f->send, f->recv, f->recv_numel, f->dtype);
        return;
    }
    CHECK(f->packed == f->send_numel, "a quantized all-gather of %zu elements, %zu packed", f->send_numel, f->packed);
    open_wires(f, mem, format, 1, comm->world);
    quantize_runs(f, f->send, f->dtype, f->wire_send);
    f->handle = comm_all_gather_start(comm, f->wire_send, f->wire_recv, f->wire_bytes * (size_t)comm->world, DTYPE_INT8);
}

void inflight_reduce_scatter_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire) {
    CHECK(f->send_numel == f->recv_numel * (size_t)comm->world, "a reduce-scatter of %zu elements into %zu a rank",
          f->send_numel, f->recv_numel);
    f->comm = comm;
    if (wire.format.bits == 0) {
        f->handle = comm_reduce_scatter_start(comm, f->send, f->recv, f->send_numel, f->dtype, COMM_AVG);
        return;
    }
    CHECK(f->packed == f->recv_numel, "a quantized reduce-scatter of %zu elements a rank, runs of %zu", f->recv_numel,
          f->packed);
    open_wires(f, mem, wire.format, comm->world, comm->world);
    open_sums(f, mem);
    set_hops(f, comm, wire);
    // rank q = node·H + place: its block goes first to my node's rank of that place, with the blocks of
    // that place in the other nodes (one hop: H = N, so to rank q itself)
    int H = f->node ? f->node->world : comm->world, nodes = comm->world / H;
    for (int q = 0; q < comm->world; q++)
        quantize_runs(f, dtype_at(f->send, (size_t)q * f->recv_numel, f->dtype), f->dtype,
                      (char *)f->wire_send + ((size_t)(q % H) * nodes + q / H) * f->wire_bytes);
    f->handle = comm_all_to_all_start(f->node ? f->node : comm, f->wire_send, f->wire_recv,
                                      f->wire_bytes * (size_t)comm->world, DTYPE_INT8);
}

void inflight_reduce_start(InFlight *f, Comm *comm, MemAccount *mem, GradsWire wire, int root) {
    CHECK(f->recv_numel == (comm->rank == root ? f->send_numel : 0) && f->packed == f->send_numel &&
              wire.format.bits,
          "a quantized reduce of %zu elements (%zu packed) into %zu at rank %d of %d", f->send_numel, f->packed,
          f->recv_numel, root, comm->world);
    f->comm = comm;
    f->root = root;
    set_hops(f, comm, wire);
    // the first gather goes to my node's rank of the root's place (one hop: H = N, to the root), which sums
    // the node's H parts; in two hops the root then gathers and sums the N/H nodes' sums
    int H = f->node ? f->node->world : comm->world, place = root % H, nodes = comm->world / H;
    int in = (f->node ? f->node->rank : comm->rank) == place ? H : 0;
    if (comm->rank == root && nodes > in) in = nodes;
    open_wires(f, mem, wire.format, 1, in);
    if (in) open_sums(f, mem);
    quantize_runs(f, f->send, f->dtype, f->wire_send);
    f->handle = comm_gather_start(f->node ? f->node : comm, f->wire_send, in ? f->wire_recv : NULL,
                                  f->wire_bytes * (size_t)H, DTYPE_INT8, place);
}

// qwZ's arrival: each rank's wire dequantized into its part of recv.
static void dequantize_gathered(InFlight *f) {
    for (int r = 0; r < f->comm->world; r++)
        dequantize_runs(f, dtype_at(f->recv, (size_t)r * f->send_numel, f->dtype), f->dtype,
                        (const char *)f->wire_recv + (size_t)r * f->wire_bytes);
}

// Into f->sum: `count` wires from `first`, `stride` wires apart, dequantized and added in that order in fp32.
static void sum_wires(InFlight *f, int count, const char *first, size_t stride) {
    for (int k = 0; k < count; k++) {
        dequantize_runs(f, k == 0 ? f->sum : f->part, DTYPE_FP32, first + (size_t)k * stride * f->wire_bytes);
        if (k > 0) device_add(f->sum, f->part, f->packed);
    }
}

// qgZ's first hop of two has arrived: for each node n, my node's H parts of the block of my place in
// node n, summed in rank order and quantized again; the second hop sends node n its sum.
static void send_across(InFlight *f) {
    int nodes = f->across->world;
    for (int n = 0; n < nodes; n++) {
        sum_wires(f, f->node->world, (const char *)f->wire_recv + (size_t)n * f->wire_bytes, (size_t)nodes);
        quantize_runs(f, f->sum, DTYPE_FP32, (char *)f->wire_send + (size_t)n * f->wire_bytes);
    }
    f->handle = comm_all_to_all_start(f->across, f->wire_send, f->wire_recv, f->wire_bytes * (size_t)nodes, DTYPE_INT8);
    comm_wait(f->across, &f->handle);
}

// qgZ's reduce to one rank, the first hop of two has arrived: at my node's rank of the root's place, the
// node's H parts summed in rank order and quantized again, gathered at the root from that place's ranks.
static void gather_across(InFlight *f) {
    int nodes = f->across->world, root_node = f->root / f->node->world;
    if (f->node->rank != f->root % f->node->world) return;  // my part has gone
    sum_wires(f, f->node->world, f->wire_recv, 1);
    quantize_runs(f, f->sum, DTYPE_FP32, f->wire_send);
    f->handle = comm_gather_start(f->across, f->wire_send, f->across->rank == root_node ? f->wire_recv : NULL,
                                  f->wire_bytes * (size_t)nodes, DTYPE_INT8, root_node);
    comm_wait(f->across, &f->handle);
}

// qgZ's arrival: each rank's part of my rows (two hops: each node's sum), dequantized, added in rank
// order in fp32; the average over all N rounded once to the gradients' dtype.
static void sum_parts(InFlight *f) {
    sum_wires(f, f->node ? f->across->world : f->comm->world, f->wire_recv, 1);
    device_scale(f->sum, f->packed, 1.0f / (float)f->comm->world);
    if (f->dtype == DTYPE_FP32) device_copy(f->recv, f->sum, f->recv_numel);
    else device_round(f->recv, f->sum, f->recv_numel);
}

int inflight_wait(InFlight *f, Comm *comm) {
    if (!f->send) return 0;
    CHECK(!f->comm || comm == f->comm,
          "waiting for a collective of %d ranks on a group of %d: wait on the group it was started on",
          f->comm ? f->comm->world : 0, comm->world);
    comm_wait(f->node ? f->node : comm, &f->handle);
    if (f->format.bits && f->handle.op == COMM_ALL_GATHER) dequantize_gathered(f);
    if (f->node && f->handle.op == COMM_ALL_TO_ALL) send_across(f);
    if (f->node && f->handle.op == COMM_GATHER) gather_across(f);
    int summed_here = f->handle.op == COMM_ALL_TO_ALL || (f->handle.op == COMM_GATHER && comm->rank == f->root);
    if (f->format.bits && summed_here) sum_parts(f);
    return 1;
}

void inflight_close(InFlight *f, MemAccount *mem) {
    device_free_as(mem, MEM_COMM_BUFFERS, f->send, f->send_numel, f->dtype);
    device_free_as(mem, MEM_COMM_BUFFERS, f->recv, f->recv_numel, f->dtype);
    if (f->format.bits) {
        int sends = f->handle.op == COMM_ALL_TO_ALL ? f->comm->world : 1;  // qgZ sends a wire to every rank
        device_free_as(mem, MEM_COMM_BUFFERS, f->wire_send, f->wire_bytes * (size_t)sends, DTYPE_INT8);
        device_free_as(mem, MEM_COMM_BUFFERS, f->wire_recv, f->wire_bytes * (size_t)f->wires_in, DTYPE_INT8);
        device_free(mem, MEM_COMM_BUFFERS, f->part, f->packed);  // NULL where nothing was summed
        device_free(mem, MEM_COMM_BUFFERS, f->sum, f->packed);
        f->wire_send = f->wire_recv = NULL;
        f->part = f->sum = NULL;
        f->node = f->across = NULL;
        f->format = (QuantFormat){0, 0};
    }
    f->send = f->recv = NULL;
    free(f->runs);
    f->runs = NULL;
    f->num_runs = 0;
}

int released_after(const GPT2Layout *layout, int t, int unit, int direction) {
    const GPT2Tensor *tensor = &layout->tensors[t];
    if (direction > 0) return tensor->last_unit == unit && unit + 1 < layout->num_units;
    if (direction < 0) return tensor->home_unit == unit;
    return 1;
}

int units_ahead(const GPT2Layout *layout, int unit, int direction, int prefetch) {
    int ahead = 0;
    while (direction != 0 && ahead < prefetch && unit + direction * (ahead + 1) >= 0 &&
           unit + direction * (ahead + 1) < layout->num_units)
        ahead++;
    return ahead;
}

void unit_params_to_host(const GPT2 *model, int unit, float *flat) {
    const GPT2Layout *layout = &model->layout;
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].home_unit == unit)
            device_to_host_widened(flat + layout->tensors[t].offset, model->params[t], layout->tensors[t].numel,
                                   model->param_dtype);
}
