#include "partition.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

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

void zero3_partition(const GPT2Layout *layout, int world, int *owner) {
    int n = layout->num_tensors;
    int *order = xmalloc((size_t)n * sizeof(int));
    for (int t = 0; t < n; t++) order[t] = t;
    // sort by size, largest first; ties keep tensor order (insertion sort: n is small)
    for (int i = 1; i < n; i++) {
        int t = order[i], j = i;
        while (j > 0 && layout->tensors[order[j - 1]].numel < layout->tensors[t].numel) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = t;
    }
    size_t *load = xcalloc((size_t)world, sizeof(size_t));
    for (int i = 0; i < n; i++) {
        int least = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[least]) least = r;
        owner[order[i]] = least;
        load[least] += layout->tensors[order[i]].numel;
    }
    free(load);
    free(order);
}

size_t zero3_owned_bytes(const GPT2Layout *layout, const int *owner, int rank) {
    size_t bytes = 0;
    for (int t = 0; t < layout->num_tensors; t++)
        if (owner[t] == rank) bytes += layout->tensors[t].numel * sizeof(float);
    return bytes;
}

int fsdp_slice_rows(const GPT2Tensor *tensor, int world) { return (tensor->rows + world - 1) / world; }

size_t fsdp_slice_numel(const GPT2Tensor *tensor, int world) {
    return (size_t)fsdp_slice_rows(tensor, world) * tensor->cols;
}

size_t fsdp_padded_numel(const GPT2Tensor *tensor, int world) {
    return fsdp_slice_numel(tensor, world) * (size_t)world;
}

size_t fsdp_padded_params(const GPT2Layout *layout, int world) {
    size_t total = 0;
    for (int t = 0; t < layout->num_tensors; t++) total += fsdp_padded_numel(&layout->tensors[t], world);
    return total;
}
