// device.h: where training buffers live and the few operations the strategies
// do on them. The CPU build (device_cpu.c) keeps everything in host memory; the
// CUDA build (device_cuda.cu) keeps parameters, gradients, optimizer state and
// activations in GPU memory and runs these operations as kernels on the compute
// stream. Strategies use only these calls, so the same strategy code runs on both.
#ifndef SHARDLAB_DEVICE_H
#define SHARDLAB_DEVICE_H

#include <stddef.h>

#include "device/dtype.h"
#include "device/memory.h"
#include "device/optim.h"
#include "device/quantize.h"

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
// The same of a span in host memory (--offload-optimizer), on the CPU: adamw_step_span,
// once a wait has covered the copies into it (the dry device: nothing).
void device_host_adamw(AdamWSpan *span, AdamWConfig config);
// ema_update (optim.h) on device buffers, with the same rounding on every device.
void device_ema_update(float *ema, const float *params, size_t count, float decay);
void device_swap(float *a, float *b, size_t count);  // a <-> b, element by element

// Parameters and gradients are buffers of a DType (dtype.h): fp32, or bf16 in a
// --precision bf16 run. These are the calls above for either.
void *device_alloc_as(MemAccount *acct, MemCategory category, size_t count, DType dtype);
void device_free_as(MemAccount *acct, MemCategory category, void *ptr, size_t count, DType dtype);
// device_alloc_as for a buffer its user writes whole before reading any of it (a collective's
// copy-in and copy-out buffers, gathered parameters): its contents are undefined until then, and
// the CPU's allocator saves zero-filling a block it hands out again. Freed with device_free_as.
void *device_alloc_overwritten_as(MemAccount *acct, MemCategory category, size_t count, DType dtype);
void device_copy_as(void *dst, const void *src, size_t count, DType dtype);
void device_zero_as(void *ptr, size_t count, DType dtype);
// dst += src; in bf16 each sum is worked out in fp32 and rounded once.
void device_add_as(void *dst, const void *src, size_t count, DType dtype);
double device_sum_squares_as(const void *x, size_t count, DType dtype);
void device_scale_as(void *x, size_t count, DType dtype, float factor);
void device_to_host_as(void *host, const void *src, size_t count, DType dtype);
void device_from_host_as(void *dst, const void *host, size_t count, DType dtype);
// Device to host, widened to fp32 on the way (bf16 to fp32 is exact).
void device_to_host_widened(float *host, const void *src, size_t count, DType dtype);
// Host fp32 to device, rounded to dtype on the way.
void device_from_host_rounded(void *dst, const float *host, size_t count, DType dtype);
// The conversions of a bf16 run (round to nearest, ties to even: dtype.h).
void device_widen(float *dst, const bf16 *src, size_t count);         // dst = src, exactly
void device_round(bf16 *dst, const float *src, size_t count);         // dst = round(src)
void device_add_rounded(bf16 *dst, const float *src, size_t count);   // dst = round(dst + src)
// Block-wise int8 or int4 (quantize.h): `count` numbers of `dtype` at x into the
// quant_wire_bytes(count, format) bytes at wire (scales, then codes), and back.
void device_quantize(void *wire, const void *x, size_t count, DType dtype, QuantFormat format);
void device_dequantize(void *x, const void *wire, size_t count, DType dtype, QuantFormat format);

// --offload-optimizer's copies between a device buffer and a host one, on their
// own: each begins once the device work queued so far is done and runs beside the
// work queued after it (CUDA: a copy stream of its own; the CPU build copies at
// once, the dry device not at all). A mark stands for every copy started before
// it: waiting for it holds the host until they are done. The buffers a copy
// reads or writes stay untouched until a wait has covered it.
void device_copy_start(void *dst, const void *src, size_t count, DType dtype);
long device_copies_mark(void);
void device_copies_wait(long mark);

// Host memory for staging device buffers through MPI (pinned in the CUDA build).
void *device_host_alloc(size_t bytes);
void device_host_free(void *ptr);
// Waits for all queued device work (the CPU build has none).
void device_synchronize(void);
// Bytes the allocator behind device_alloc holds: buffers in use plus memory it
// keeps for reuse, now and at the peak. The CPU build: the cache in `acct`
// (cache.h); the CUDA build: this process's stream-ordered pool, whatever the
// account (its buffers all come from that one pool).
typedef struct {
    uint64_t current, peak;  // bytes (64-bit as the accounts', memory.h)
} DeviceReserved;
DeviceReserved device_reserved(const MemAccount *acct);

#ifdef __cplusplus
}
#endif

#endif
