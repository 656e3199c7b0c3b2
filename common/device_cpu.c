// device_cpu.c: the CPU build's device: host memory (from the account's cache,
// memory.h) and plain loops.
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "util/errors.h"

const char *device_name(void) { return "cpu"; }
void device_init(int local_rank) { (void)local_rank; }
int device_count(void) { return 0; }

float *device_alloc(MemAccount *acct, MemCategory category, size_t count) {
    return mem_alloc_floats(acct, category, count);
}

void device_free(MemAccount *acct, MemCategory category, float *ptr, size_t count) {
    mem_free_floats(acct, category, ptr, count);
}

int *device_alloc_ints(MemAccount *acct, MemCategory category, size_t count) {
    return mem_alloc_ints(acct, category, count);
}

void device_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count) {
    mem_free_ints(acct, category, ptr, count);
}

void device_ints_from_host(int *dst, const int *host, size_t count) { memcpy(dst, host, count * sizeof(int)); }

void device_copy(float *dst, const float *src, size_t count) { memcpy(dst, src, count * sizeof(float)); }
void device_zero(float *ptr, size_t count) { memset(ptr, 0, count * sizeof(float)); }

void device_add(float *dst, const float *src, size_t count) {
    for (size_t i = 0; i < count; i++) dst[i] += src[i];
}

double device_sum_squares(const float *x, size_t count) {
    double sum = 0;
    for (size_t i = 0; i < count; i++) sum += (double)x[i] * x[i];
    return sum;
}

void device_scale(float *x, size_t count, float factor) {
    for (size_t i = 0; i < count; i++) x[i] *= factor;
}

void device_to_host(float *host, const float *src, size_t count) { memcpy(host, src, count * sizeof(float)); }
void device_from_host(float *dst, const float *host, size_t count) { memcpy(dst, host, count * sizeof(float)); }
void device_adamw(AdamWSpan *span, AdamWConfig config) { adamw_step_span(span, config); }
float *device_host_alloc(size_t count) { return xcalloc(count, sizeof(float)); }
void device_host_free(float *ptr) { free(ptr); }
void device_synchronize(void) {}

DeviceReserved device_reserved(const MemAccount *acct) {
    return (DeviceReserved){mem_reserved_bytes(acct), mem_reserved_peak_bytes(acct)};
}
