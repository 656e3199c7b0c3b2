#include "kit/partition.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

void flat_layout_init(FlatLayout *flat, const GPT2Layout *layout, const size_t *count) {
    flat->offset = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    flat->count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    flat->unit_begin = xcalloc((size_t)layout->num_units, sizeof(size_t));
    flat->unit_end = xcalloc((size_t)layout->num_units, sizeof(size_t));
    size_t offset = 0;
    for (int u = 0; u < layout->num_units; u++) {
        flat->unit_begin[u] = offset;
        for (int t = 0; t < layout->num_tensors; t++) {
            if (layout->tensors[t].home_unit != u) continue;
            flat->offset[t] = offset;
            flat->count[t] = count[t];
            offset += count[t];
        }
        flat->unit_end[u] = offset;
    }
    flat->total = offset;
}

void flat_layout_free(FlatLayout *flat) {
    free(flat->offset);
    free(flat->count);
    free(flat->unit_begin);
    free(flat->unit_end);
    memset(flat, 0, sizeof *flat);
}

typedef struct {
    size_t numel;
    int t;
} SizedTensor;

// Larger tensors first; of equal size, the earlier tensor first (a total order: the same on every rank).
static int larger_first(const void *a, const void *b) {
    const SizedTensor *x = a, *y = b;
    if (x->numel != y->numel) return x->numel > y->numel ? -1 : 1;
    return (x->t > y->t) - (x->t < y->t);
}

void whole_tensor_owners(const GPT2Layout *layout, int world, int *owner) {
    int n = layout->num_tensors;
    // sort by size, largest first; ties keep tensor order
    SizedTensor *sized = xmalloc((size_t)n * sizeof *sized);
    for (int t = 0; t < n; t++) sized[t] = (SizedTensor){layout->tensors[t].numel, t};
    qsort(sized, (size_t)n, sizeof *sized, larger_first);
    int *order = xmalloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) order[i] = sized[i].t;
    free(sized);
    // Only the first min(world, n) ranks can receive a tensor: while some rank
    // holds nothing, the least-loaded rank is the lowest empty one. A min-heap
    // on (load, rank) picks each tensor's rank in O(log) time, so any world size
    // costs O(n log n).
    int ranks = world < n ? world : n;
    size_t *load = xcalloc((size_t)ranks, sizeof(size_t));
    int *heap = xmalloc((size_t)ranks * sizeof(int));  // heap[0]: the least-loaded rank
    for (int r = 0; r < ranks; r++) heap[r] = r;      // all loads 0: rank order is a heap
    for (int i = 0; i < n; i++) {
        int least = heap[0];
        owner[order[i]] = least;
        load[least] += layout->tensors[order[i]].numel;
        for (size_t k = 0;;) {  // sift the grown rank down
            size_t child = 2 * k + 1, smallest = k;
            for (size_t c = child; c <= child + 1 && c < (size_t)ranks; c++)
                if (load[heap[c]] < load[heap[smallest]] ||
                    (load[heap[c]] == load[heap[smallest]] && heap[c] < heap[smallest]))
                    smallest = c;
            if (smallest == k) break;
            int tmp = heap[k];
            heap[k] = heap[smallest];
            heap[smallest] = tmp;
            k = smallest;
        }
    }
    free(heap);
    free(load);
    free(order);
}

size_t owned_numel(const GPT2Layout *layout, const int *owner, int rank) {
    size_t numel = 0;
    for (int t = 0; t < layout->num_tensors; t++)
        if (owner[t] == rank) numel += layout->tensors[t].numel;
    return numel;
}

int row_slice_rows(const GPT2Tensor *tensor, int world) { return (tensor->rows + world - 1) / world; }

size_t row_slice_numel(const GPT2Tensor *tensor, int world) {
    return (size_t)row_slice_rows(tensor, world) * tensor->cols;
}

size_t row_slice_padded_numel(const GPT2Tensor *tensor, int world) {
    size_t numel = row_slice_numel(tensor, world);
    if (numel > SIZE_MAX / (size_t)world)  // a 32-bit size_t (the browser's planner) at very many ranks
        fatal("%s padded to %d ranks' slices overflows a size (%zu-bit)", tensor->name, world, 8 * sizeof(size_t));
    return numel * (size_t)world;
}

int row_slice_real_rows(const GPT2Tensor *tensor, int world, int rank, int *first) {
    int k = row_slice_rows(tensor, world);
    *first = rank * k;
    return *first >= tensor->rows ? 0 : (*first + k > tensor->rows ? tensor->rows - *first : k);
}

size_t flat_range_numel(size_t num_params, int world) { return (num_params + (size_t)world - 1) / (size_t)world; }

void flat_range(size_t num_params, int world, int rank, size_t *begin, size_t *end) {
    size_t R = flat_range_numel(num_params, world);
    *begin = (size_t)rank * R;
    *end = *begin + R;
}

int flat_range_owner(size_t num_params, int world, size_t element) {
    return (int)(element / flat_range_numel(num_params, world));
}

size_t flat_range_overlap(size_t num_params, int world, int rank, size_t first, size_t count, size_t *begin,
                          size_t *end) {
    size_t lo, hi;
    flat_range(num_params, world, rank, &lo, &hi);
    *begin = first > lo ? first : lo;
    *end = first + count < hi ? first + count : hi;
    if (*end <= *begin) *end = *begin = first > lo ? first : lo;
    return *end - *begin;
}

int *flat_range_pieces(const GPT2Layout *layout, int world) {
    size_t P = layout->num_params;
    int *piece_start = xcalloc((size_t)layout->num_tensors + 1, sizeof(int));
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        int first_owner = flat_range_owner(P, world, tensor->offset);
        int last_owner = flat_range_owner(P, world, tensor->offset + tensor->numel - 1);
        piece_start[t + 1] = piece_start[t] + last_owner - first_owner + 1;
    }
    return piece_start;
}
