// device_dry.c: the dry device of build/plan. Buffers are accounted through the
// same accountant and cache as the CPU build's (a dry cache: addresses that no
// memory stands behind, cache.h), and nothing is computed or copied, so the
// strategies' own code runs a step of any size in an instant and leaves exactly
// the books a real run keeps. Its units' compute is models/gpt2_dry.c.
#include <stdlib.h>

#include "device/device.h"
#include "util/errors.h"

const char *device_name(void) { return "dry"; }
void device_init(int local_rank) { (void)local_rank; }
int device_count(void) { return 0; }

float *device_alloc(MemAccount *acct, MemCategory category, size_t count) {
    CHECK(acct->cache.dry, "the dry device needs a dry account");
    return mem_alloc_floats(acct, category, count);
}

void device_free(MemAccount *acct, MemCategory category, float *ptr, size_t count) {
    mem_free_floats(acct, category, ptr, count);
}

int *device_alloc_ints(MemAccount *acct, MemCategory category, size_t count) {
    CHECK(acct->cache.dry, "the dry device needs a dry account");
    return mem_alloc_ints(acct, category, count);
}

void device_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count) {
    mem_free_ints(acct, category, ptr, count);
}

void *device_alloc_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    CHECK(acct->cache.dry, "the dry device needs a dry account");
    return mem_alloc_elements(acct, category, count, dtype_size(dtype));
}

void *device_alloc_overwritten_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    return device_alloc_as(acct, category, count, dtype);  // an address alone, either way
}

void device_free_as(MemAccount *acct, MemCategory category, void *ptr, size_t count, DType dtype) {
    mem_free_elements(acct, category, ptr, count, dtype_size(dtype));
}

// Nothing behind the buffers: every operation on them is nothing.
void device_ints_from_host(int *dst, const int *host, size_t count) { (void)dst, (void)host, (void)count; }
void device_copy(float *dst, const float *src, size_t count) { (void)dst, (void)src, (void)count; }
void device_zero(float *ptr, size_t count) { (void)ptr, (void)count; }
void device_add(float *dst, const float *src, size_t count) { (void)dst, (void)src, (void)count; }
void device_to_host(float *host, const float *src, size_t count) { (void)host, (void)src, (void)count; }
void device_from_host(float *dst, const float *host, size_t count) { (void)dst, (void)host, (void)count; }
double device_sum_squares(const float *x, size_t count) { return (void)x, (void)count, 0.0; }
void device_scale(float *x, size_t count, float factor) { (void)x, (void)count, (void)factor; }
void device_adamw(AdamWSpan *span, AdamWConfig config) { (void)span, (void)config; }
void device_host_adamw(AdamWSpan *span, AdamWConfig config) { (void)span, (void)config; }
void device_ema_update(float *ema, const float *params, size_t count, float decay) {
    (void)ema, (void)params, (void)count, (void)decay;
}
void device_swap(float *a, float *b, size_t count) { (void)a, (void)b, (void)count; }
void device_copy_as(void *dst, const void *src, size_t count, DType dtype) { (void)dst, (void)src, (void)count, (void)dtype; }
void device_zero_as(void *ptr, size_t count, DType dtype) { (void)ptr, (void)count, (void)dtype; }
void device_add_as(void *dst, const void *src, size_t count, DType dtype) { (void)dst, (void)src, (void)count, (void)dtype; }
double device_sum_squares_as(const void *x, size_t count, DType dtype) { return (void)x, (void)count, (void)dtype, 0.0; }
void device_scale_as(void *x, size_t count, DType dtype, float factor) { (void)x, (void)count, (void)dtype, (void)factor; }
void device_to_host_as(void *host, const void *src, size_t count, DType dtype) {
    (void)host, (void)src, (void)count, (void)dtype;
}
void device_from_host_as(void *dst, const void *host, size_t count, DType dtype) {
    (void)dst, (void)host, (void)count, (void)dtype;
}
void device_copy_start(void *dst, const void *src, size_t count, DType dtype) {
    (void)dst, (void)src, (void)count, (void)dtype;
}
long device_copies_mark(void) { return 0; }
void device_copies_wait(long mark) { (void)mark; }
void device_to_host_widened(float *host, const void *src, size_t count, DType dtype) {
    (void)host, (void)src, (void)count, (void)dtype;
}
void device_from_host_rounded(void *dst, const float *host, size_t count, DType dtype) {
    (void)dst, (void)host, (void)count, (void)dtype;
}
void device_widen(float *dst, const bf16 *src, size_t count) { (void)dst, (void)src, (void)count; }
void device_round(bf16 *dst, const float *src, size_t count) { (void)dst, (void)src, (void)count; }
void device_add_rounded(bf16 *dst, const float *src, size_t count) { (void)dst, (void)src, (void)count; }
void device_quantize(void *wire, const void *x, size_t count, DType dtype, QuantFormat format) {
    (void)wire, (void)x, (void)count, (void)dtype, (void)format;
}
void device_dequantize(void *x, const void *wire, size_t count, DType dtype, QuantFormat format) {
    (void)x, (void)wire, (void)count, (void)dtype, (void)format;
}

void *device_host_alloc(size_t bytes) { return xcalloc(bytes, 1); }
void device_host_free(void *ptr) { free(ptr); }
void device_synchronize(void) {}

DeviceReserved device_reserved(const MemAccount *acct) {
    return (DeviceReserved){mem_reserved_bytes(acct), mem_reserved_peak_bytes(acct)};
}
