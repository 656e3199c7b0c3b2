// device.h: where training buffers live and the few operations the strategies
// do on them. The CPU build (device_cpu.c) keeps everything in host memory; the
// CUDA build (device_cuda.cu) keeps parameters, gradients, optimizer state and
// activations in GPU memory and runs these operations as kernels on the compute
// stream. Strategies use only these calls, so the same strategy code runs on both.
#ifndef SHARDLAB_DEVICE_H
#define SHARDLAB_DEVICE_H

#include <stddef.h>

#include "memory.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

// "cpu" or "cuda".
const char *device_name(void);
// Picks the GPU for this process (CUDA build; local_rank modulo the GPU count).
void device_init(int local_rank);
// Number of GPUs visible (0 in the CPU build).
int device_count(void);

// A zero-filled buffer of `count` floats, counted under `category`.
float *device_alloc(MemAccount *acct, MemCategory category, size_t count);
void device_free(MemAccount *acct, MemCategory category, float *ptr, size_t count);

// The same for token ids.
int *device_alloc_ints(MemAccount *acct, MemCategory category, size_t count);
void device_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count);
void device_ints_from_host(int *dst, const int *host, size_t count);

void device_copy(float *dst, const float *src, size_t count);   // device to device
void device_zero(float *ptr, size_t count);
void device_add(float *dst, const float *src, size_t count);    // dst += src
void device_to_host(float *host, const float *src, size_t count);
void device_from_host(float *dst, const float *host, size_t count);
// The sum of x[i]^2, accumulated in double in a fixed order (the same result
// every time for the same buffer).
double device_sum_squares(const float *x, size_t count);
void device_scale(float *x, size_t count, float factor);  // x *= factor
// One AdamW step of a span whose buffers are device memory.
void device_adamw(AdamWSpan *span, AdamWConfig config);
// Host memory for staging device buffers through MPI (pinned in the CUDA build).
float *device_host_alloc(size_t count);
void device_host_free(float *ptr);
// Waits for all queued device work (the CPU build has none).
void device_synchronize(void);
// Bytes the allocator behind device_alloc holds: buffers in use plus memory it
// keeps for reuse, now and at the peak. The CPU build: the cache in `acct`
// (cache.h); the CUDA build: this process's stream-ordered pool, whatever the
// account (its buffers all come from that one pool).
typedef struct {
    size_t current, peak;
} DeviceReserved;
DeviceReserved device_reserved(const MemAccount *acct);

#ifdef __cplusplus
}
#endif

#endif
