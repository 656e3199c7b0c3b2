#include "memory.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "errors.h"

const char *const mem_category_names[MEM_NUM_CATEGORIES] = {
    "params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers",
};

void mem_account_add(MemAccount *acct, MemCategory category, size_t bytes) {
    acct->current[category] += bytes;
    if (acct->current[category] > acct->peak[category]) acct->peak[category] = acct->current[category];
    acct->total_current += bytes;
    if (acct->total_current > acct->total_peak) acct->total_peak = acct->total_current;
}

void mem_account_sub(MemAccount *acct, MemCategory category, size_t bytes) {
    CHECK(acct->current[category] >= bytes, "freeing %zu bytes of %s, only %zu accounted", bytes,
          mem_category_names[category], acct->current[category]);
    acct->current[category] -= bytes;
    acct->total_current -= bytes;
}

float *mem_alloc_floats(MemAccount *acct, MemCategory category, size_t count) {
    float *ptr = xcalloc(count, sizeof(float));
    mem_account_add(acct, category, count * sizeof(float));
    return ptr;
}

void mem_free_floats(MemAccount *acct, MemCategory category, float *ptr, size_t count) {
    if (!ptr) return;
    mem_account_sub(acct, category, count * sizeof(float));
    free(ptr);
}

size_t mem_rss_peak_bytes(void) {
    struct rusage usage;
    if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
    return (size_t)usage.ru_maxrss * 1024;  // Linux reports kilobytes
}
