// device_cuda.cu: the CUDA build's device. Buffers come from CUDA's
// stream-ordered allocator (cudaMallocAsync on the compute stream), so
// allocating and freeing gathered buffers inside a step never synchronizes the
// GPU. All work goes to the legacy default stream, the "compute stream"; NCCL
// runs on a stream of its own (comm/nccl.cu) and is ordered with events.
//
// One process drives one GPU, so the cuBLAS handle and the selected device are
// per-process state kept here, created once by device_init. Copies name no
// direction (cudaMemcpyDefault): a buffer of a host category (memory.h) is pinned
// host memory, and the same calls move it.
#include <stdio.h>
#include <string.h>

#include "device/cuda_check.h"
#include "device/device.h"
#include "device/device_cuda.h"

static cublasHandle_t cublas_handle;  // created by device_init, one per process
static cublasLtHandle_t cublaslt_handle;  // the same, for products with epilogues
static int cuda_device = -1;
// --offload-optimizer's copies (device_copy_start): their stream, the event that
// orders each after the compute stream's work, and the marks, reused in a ring
// (a mark is waited for long before COPY_MARKS more are made: at most two wait).
enum { COPY_MARKS = 64 };
static cudaStream_t copy_stream;
static cudaEvent_t compute_done, copy_marks[COPY_MARKS];
static long copy_marks_made;

extern "C" const char *device_name(void) { return "cuda"; }

extern "C" int device_count(void) {
    int count = 0;
    // no driver or no GPU is an answer here (0), not an error: the caller says what to do
    if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
    return count;
}

extern "C" void device_init(int local_rank) {
    int count = device_count();
    if (count == 0) fatal("this is the CUDA build, but no GPU is visible (use the CPU build in build/)");
    cuda_device = local_rank % count;
    CUDA_CHECK(cudaSetDevice(cuda_device));
    CUBLAS_CHECK(cublasCreate(&cublas_handle));
    // fp32 mode: cuBLAS may use TF32 tensor cores unless NVIDIA_TF32_OVERRIDE=0
    CUBLAS_CHECK(cublasSetMathMode(cublas_handle, CUBLAS_TF32_TENSOR_OP_MATH));
    CUBLAS_CHECK(cublasLtCreate(&cublaslt_handle));
    // keep freed memory in the pool instead of returning it at every sync
    cudaMemPool_t pool;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cuda_device));
    uint64_t keep_all = UINT64_MAX;
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
    // not ordered with the legacy default stream implicitly: only through compute_done
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming));
    for (int i = 0; i < COPY_MARKS; i++) CUDA_CHECK(cudaEventCreateWithFlags(&copy_marks[i], cudaEventDisableTiming));
}

cublasHandle_t device_cublas(void) {
    CHECK(cuda_device >= 0, "device_init was not called");
    return cublas_handle;
}

cublasLtHandle_t device_cublaslt(void) {
    CHECK(cuda_device >= 0, "device_init was not called");
    return cublaslt_handle;
}

// Zeroed device memory from the stream-ordered pool, counted under `category`.
// A host category's buffer is pinned host memory (--offload-optimizer): the
// copies to and from it run at the link's full rate, and the CPU updates it.
static void *alloc_zeroed(MemAccount *acct, MemCategory category, size_t bytes) {
    void *ptr = NULL;
    if (mem_on_host(category)) {
        CUDA_CHECK(cudaMallocHost(&ptr, bytes ? bytes : 1));
        memset(ptr, 0, bytes);
    } else {
        CUDA_CHECK(cudaMallocAsync(&ptr, bytes ? bytes : 1, 0));
        CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes ? bytes : 1, 0));
    }
    mem_account_add(acct, category, bytes);
    return ptr;
}

static void free_counted(MemAccount *acct, MemCategory category, void *ptr, size_t bytes) {
    if (!ptr) return;
    mem_account_sub(acct, category, bytes);
    if (mem_on_host(category)) {
        CUDA_CHECK(cudaStreamSynchronize(0));  // no copy queued before may still read it,
        CUDA_CHECK(cudaStreamSynchronize(copy_stream));  // on either stream
        CUDA_CHECK(cudaFreeHost(ptr));
    } else {
        CUDA_CHECK(cudaFreeAsync(ptr, 0));  // after everything queued before it, NCCL waits included
    }
}

extern "C" float *device_alloc(MemAccount *acct, MemCategory category, size_t count) {
    return (float *)alloc_zeroed(acct, category, count * sizeof(float));
}

extern "C" void device_free(MemAccount *acct, MemCategory category, float *ptr, size_t count) {
    free_counted(acct, category, ptr, count * sizeof(float));
}

extern "C" int *device_alloc_ints(MemAccount *acct, MemCategory category, size_t count) {
    return (int *)alloc_zeroed(acct, category, count * sizeof(int));
}

extern "C" void device_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count) {
    free_counted(acct, category, ptr, count * sizeof(int));
}

extern "C" void device_ints_from_host(int *dst, const int *host, size_t count) {
    CUDA_CHECK(cudaMemcpy(dst, host, count * sizeof(int), cudaMemcpyDefault));
}

extern "C" void device_copy(float *dst, const float *src, size_t count) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDefault, 0));
}

extern "C" void device_zero(float *ptr, size_t count) { CUDA_CHECK(cudaMemsetAsync(ptr, 0, count * sizeof(float), 0)); }

__global__ static void add_kernel(float *dst, const float *src, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] += src[i];
}

extern "C" void device_add(float *dst, const float *src, size_t count) {
    if (count == 0) return;
    add_kernel<<<device_blocks(count, 256), 256>>>(dst, src, count);
    CUDA_CHECK_LAUNCH();
}

// Sum of squares in two fixed stages: block b adds up elements b, b + grid, ...
// (each thread its own stride, then a tree in shared memory, all in double) into
// partial[b]; the host adds the partials in order. No atomics: the same buffer
// gives the same sum every time.
#define SUM_SQUARES_BLOCKS 256
#define SUM_SQUARES_THREADS 256
// An element of either dtype as fp32 (dtype.h's conversions run in kernels too).
__device__ static float as_float(float x) { return x; }
__device__ static float as_float(bf16 x) { return bf16_to_float(x); }

template <typename T>
__global__ static void sum_squares_kernel(double *partial, const T *x, size_t count) {
    __shared__ double sums[SUM_SQUARES_THREADS];
    double sum = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        sum += (double)as_float(x[i]) * as_float(x[i]);
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

template <typename T>
static double sum_squares(const T *x, size_t count) {
    if (count == 0) return 0;
    double *partial = NULL, host[SUM_SQUARES_BLOCKS];
    CUDA_CHECK(cudaMallocAsync((void **)&partial, sizeof host, 0));
    sum_squares_kernel<T><<<SUM_SQUARES_BLOCKS, SUM_SQUARES_THREADS>>>(partial, x, count);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpy(host, partial, sizeof host, cudaMemcpyDefault));
    CUDA_CHECK(cudaFreeAsync(partial, 0));
    double sum = 0;
    for (int b = 0; b < SUM_SQUARES_BLOCKS; b++) sum += host[b];
    return sum;
}

extern "C" double device_sum_squares(const float *x, size_t count) { return sum_squares(x, count); }

__global__ static void scale_kernel(float *x, size_t count, float factor) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) x[i] *= factor;
}

extern "C" void device_scale(float *x, size_t count, float factor) {
    if (count == 0) return;
    scale_kernel<<<device_blocks(count, 256), 256>>>(x, count, factor);
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_to_host(float *host, const float *src, size_t count) {
    CUDA_CHECK(cudaMemcpy(host, src, count * sizeof(float), cudaMemcpyDefault));
}

extern "C" void device_from_host(float *dst, const float *host, size_t count) {
    CUDA_CHECK(cudaMemcpy(dst, host, count * sizeof(float), cudaMemcpyDefault));
}

// AdamW, fused: one pass reads g, m, v, p and writes m, v, p (device/optim.c is
// the same arithmetic on the CPU).
__global__ static void adamw_kernel(float *params, const float *grads, const bf16 *grads_bf16, bf16 *working,
                                    float *m, float *v, size_t count,
                                    float lr, float beta1, float beta2, float eps, float weight_decay,
                                    float beta1_correction, float beta2_correction) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float g = grads_bf16 ? bf16_to_float(grads_bf16[i]) : grads[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float m_hat = mi / beta1_correction, v_hat = vi / beta2_correction;
    params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
    if (working) working[i] = bf16_from_float(params[i]);
}

extern "C" void device_adamw(AdamWSpan *span, AdamWConfig c) {
    span->step++;
    if (span->count == 0) return;
    float beta1_correction = 1.0f - powf(c.beta1, (float)span->step);
    float beta2_correction = 1.0f - powf(c.beta2, (float)span->step);
    adamw_kernel<<<device_blocks(span->count, 256), 256>>>(span->params, span->grads, span->grads_bf16, span->working,
                                                            span->m, span->v, span->count,
                                                            c.lr, c.beta1, c.beta2, c.eps, c.weight_decay,
                                                            beta1_correction, beta2_correction);
    CUDA_CHECK_LAUNCH();
}

// The copies into the span have been waited for (device_copies_wait): the CPU's
// AdamW, the same arithmetic as adamw_kernel's, bit for bit.
extern "C" void device_host_adamw(AdamWSpan *span, AdamWConfig config) { adamw_step_span(span, config); }

// Each product and the sum rounded on its own, as the CPU's C (no fused
// multiply-add): the GPU's average is bit for bit the CPU's.
__global__ static void ema_kernel(float *ema, const float *params, size_t n, float decay) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ema[i] = __fadd_rn(__fmul_rn(decay, ema[i]), __fmul_rn(__fsub_rn(1.0f, decay), params[i]));
}

extern "C" void device_ema_update(float *ema, const float *params, size_t count, float decay) {
    if (count == 0) return;
    ema_kernel<<<device_blocks(count, 256), 256>>>(ema, params, count, decay);
    CUDA_CHECK_LAUNCH();
}

__global__ static void swap_kernel(float *a, float *b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = a[i];
        a[i] = b[i];
        b[i] = x;
    }
}

extern "C" void device_swap(float *a, float *b, size_t count) {
    if (count == 0) return;
    swap_kernel<<<device_blocks(count, 256), 256>>>(a, b, count);
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_synchronize(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

// The pool's reserved memory: what it holds from the driver, buffers in use and
// freed ones it keeps (device_init sets no release threshold), now and at the peak.
extern "C" DeviceReserved device_reserved(const MemAccount *acct) {
    (void)acct;
    if (cuda_device < 0) return DeviceReserved{0, 0};
    cudaMemPool_t pool;
    uint64_t current = 0, high = 0;
    CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cuda_device));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &current));
    CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high));
    return DeviceReserved{(uint64_t)current, (uint64_t)high};
}

extern "C" void *device_host_alloc(size_t bytes) {
    void *ptr = NULL;
    CUDA_CHECK(cudaMallocHost(&ptr, bytes ? bytes : 1));
    return ptr;
}

extern "C" void device_host_free(void *ptr) {
    if (ptr) CUDA_CHECK(cudaFreeHost(ptr));
}

// ---- buffers of either dtype (device.h) ----

extern "C" void *device_alloc_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    return alloc_zeroed(acct, category, count * dtype_size(dtype));
}

// A GPU zero-fills at its memory's speed, on the stream: not worth a second path.
extern "C" void *device_alloc_overwritten_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    return device_alloc_as(acct, category, count, dtype);
}

extern "C" void device_free_as(MemAccount *acct, MemCategory category, void *ptr, size_t count, DType dtype) {
    free_counted(acct, category, ptr, count * dtype_size(dtype));
}

extern "C" void device_copy_as(void *dst, const void *src, size_t count, DType dtype) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * dtype_size(dtype), cudaMemcpyDefault, 0));
}

extern "C" void device_zero_as(void *ptr, size_t count, DType dtype) {
    CUDA_CHECK(cudaMemsetAsync(ptr, 0, count * dtype_size(dtype), 0));
}

__global__ static void add_bf16_kernel(bf16 *dst, const bf16 *src, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] = bf16_add(dst[i], src[i]);
}

extern "C" void device_add_as(void *dst, const void *src, size_t count, DType dtype) {
    if (dtype == DTYPE_FP32) {
        device_add((float *)dst, (const float *)src, count);
        return;
    }
    if (count == 0) return;
    add_bf16_kernel<<<device_blocks(count, 256), 256>>>((bf16 *)dst, (const bf16 *)src, count);
    CUDA_CHECK_LAUNCH();
}

extern "C" double device_sum_squares_as(const void *x, size_t count, DType dtype) {
    return dtype == DTYPE_FP32 ? sum_squares((const float *)x, count) : sum_squares((const bf16 *)x, count);
}

__global__ static void scale_bf16_kernel(bf16 *x, size_t count, float factor) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) x[i] = bf16_scale(x[i], factor);
}

extern "C" void device_scale_as(void *x, size_t count, DType dtype, float factor) {
    if (dtype == DTYPE_FP32) {
        device_scale((float *)x, count, factor);
        return;
    }
    if (count == 0) return;
    scale_bf16_kernel<<<device_blocks(count, 256), 256>>>((bf16 *)x, count, factor);
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_to_host_as(void *host, const void *src, size_t count, DType dtype) {
    CUDA_CHECK(cudaMemcpy(host, src, count * dtype_size(dtype), cudaMemcpyDefault));
}

extern "C" void device_from_host_as(void *dst, const void *host, size_t count, DType dtype) {
    CUDA_CHECK(cudaMemcpy(dst, host, count * dtype_size(dtype), cudaMemcpyDefault));
}

// On the copy stream, after the compute stream's work queued so far (the host
// buffer is pinned: the copy is truly asynchronous).
extern "C" void device_copy_start(void *dst, const void *src, size_t count, DType dtype) {
    CUDA_CHECK(cudaEventRecord(compute_done, 0));
    CUDA_CHECK(cudaStreamWaitEvent(copy_stream, compute_done, 0));
    CUDA_CHECK(cudaMemcpyAsync(dst, src, count * dtype_size(dtype), cudaMemcpyDefault, copy_stream));
}

extern "C" long device_copies_mark(void) {
    CUDA_CHECK(cudaEventRecord(copy_marks[copy_marks_made % COPY_MARKS], copy_stream));
    return copy_marks_made++;
}

extern "C" void device_copies_wait(long mark) {
    CHECK(mark >= 0 && mark < copy_marks_made && mark >= copy_marks_made - COPY_MARKS,
          "device_copies_wait: mark %ld is not one of the last %d made (%ld so far)", mark, COPY_MARKS, copy_marks_made);
    CUDA_CHECK(cudaEventSynchronize(copy_marks[mark % COPY_MARKS]));
}

extern "C" void device_to_host_widened(float *host, const void *src, size_t count, DType dtype) {
    if (dtype == DTYPE_FP32) {
        device_to_host(host, (const float *)src, count);
        return;
    }
    bf16 *staging = (bf16 *)malloc(count * sizeof(bf16) + 1);
    if (!staging) fatal("out of host memory widening %zu bf16 elements", count);
    device_to_host_as(staging, src, count, dtype);
    for (size_t i = 0; i < count; i++) host[i] = bf16_to_float(staging[i]);
    free(staging);
}

extern "C" void device_from_host_rounded(void *dst, const float *host, size_t count, DType dtype) {
    if (dtype == DTYPE_FP32) {
        device_from_host((float *)dst, host, count);
        return;
    }
    bf16 *staging = (bf16 *)malloc(count * sizeof(bf16) + 1);
    if (!staging) fatal("out of host memory rounding %zu elements to bf16", count);
    for (size_t i = 0; i < count; i++) staging[i] = bf16_from_float(host[i]);
    device_from_host_as(dst, staging, count, dtype);
    free(staging);
}

__global__ static void widen_kernel(float *dst, const bf16 *src, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] = bf16_to_float(src[i]);
}

__global__ static void round_kernel(bf16 *dst, const float *src, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] = bf16_from_float(src[i]);
}

__global__ static void add_rounded_kernel(bf16 *dst, const float *src, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) dst[i] = bf16_from_float(bf16_to_float(dst[i]) + src[i]);
}

extern "C" void device_widen(float *dst, const bf16 *src, size_t count) {
    if (count == 0) return;
    widen_kernel<<<device_blocks(count, 256), 256>>>(dst, src, count);
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_round(bf16 *dst, const float *src, size_t count) {
    if (count == 0) return;
    round_kernel<<<device_blocks(count, 256), 256>>>(dst, src, count);
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_add_rounded(bf16 *dst, const float *src, size_t count) {
    if (count == 0) return;
    add_rounded_kernel<<<device_blocks(count, 256), 256>>>(dst, src, count);
    CUDA_CHECK_LAUNCH();
}

// Block-wise int8 or int4 (quantize.h): the scales, one thread block a
// quantization block, then the codes, a thread a byte of them (int4: two numbers,
// perhaps of two blocks). A block's largest magnitude is an integer maximum of the
// magnitudes' bits, exact in any order, so the scale, and with it every code, is
// the CPU's bit for bit.
enum { QUANT_THREADS = 256 };

template <typename T> __device__ static float quant_load(const T *x, size_t i);
template <> __device__ float quant_load<float>(const float *x, size_t i) { return x[i]; }
template <> __device__ float quant_load<bf16>(const bf16 *x, size_t i) { return bf16_to_float(x[i]); }
__device__ static void quant_store(float *x, size_t i, float v) { x[i] = v; }
__device__ static void quant_store(bf16 *x, size_t i, float v) { x[i] = bf16_from_float(v); }

template <typename T>
__global__ static void quant_scales_kernel(float *scales, const T *x, size_t count, QuantFormat format) {
    __shared__ unsigned int top;
    size_t begin = (size_t)blockIdx.x * format.block, end = begin + format.block < count ? begin + format.block : count;
    if (threadIdx.x == 0) top = 0;
    __syncthreads();
    unsigned int mine = 0;
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        unsigned int bits = __float_as_uint(quant_load(x, i)) & 0x7FFFFFFFu;
        mine = bits > mine ? bits : mine;
    }
    atomicMax(&top, mine);
    __syncthreads();
    if (threadIdx.x == 0) scales[blockIdx.x] = quant_scale(__uint_as_float(top), top < 0x7F800000u, format.bits);
}

template <typename T>
__device__ static int8_t quant_code_at(const T *x, const float *scales, size_t i, size_t count, QuantFormat format) {
    return i < count ? quant_code(quant_load(x, i), scales[i / format.block], format.bits) : 0;
}

// Byte i of the codes (and of the padding to 4 bytes: zeros).
template <typename T>
__global__ static void quant_codes_kernel(uint8_t *codes, size_t padded, const T *x, const float *scales, size_t count,
                                          QuantFormat format) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= padded) return;
    if (format.bits == 8) codes[i] = (uint8_t)quant_code_at(x, scales, i, count, format);
    else
        codes[i] = quant_pair(quant_code_at(x, scales, 2 * i, count, format),
                              quant_code_at(x, scales, 2 * i + 1, count, format));
}

template <typename T>
__global__ static void dequantize_kernel(T *x, const float *scales, const uint8_t *codes, size_t count,
                                         QuantFormat format) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    int8_t code = format.bits == 8 ? (int8_t)codes[i] : quant_half(codes[i / 2], (int)(i & 1));
    quant_store(x, i, quant_value(code, scales[i / format.block]));
}

static void check_quant(QuantFormat format, DType dtype, size_t count) {
    CHECK(format.block > 0 && (format.bits == 8 || format.bits == 4) && (dtype == DTYPE_FP32 || dtype == DTYPE_BF16),
          "quantizing %s numbers to %d bits in blocks of %zu", dtype_name(dtype), format.bits, format.block);
    CHECK(quant_blocks(count, format.block) < (1u << 31), "%zu quantization blocks: more than a grid holds",
          quant_blocks(count, format.block));
}

extern "C" void device_quantize(void *wire, const void *x, size_t count, DType dtype, QuantFormat format) {
    check_quant(format, dtype, count);
    if (count == 0) return;
    unsigned int blocks = (unsigned int)quant_blocks(count, format.block);
    size_t padded = quant_wire_bytes(count, format) - 4 * (size_t)blocks;
    float *scales = (float *)wire;
    uint8_t *codes = (uint8_t *)wire + 4 * (size_t)blocks;
    if (dtype == DTYPE_FP32) {
        quant_scales_kernel<<<blocks, QUANT_THREADS>>>(scales, (const float *)x, count, format);
        CUDA_CHECK_LAUNCH();
        quant_codes_kernel<<<device_blocks(padded, 256), 256>>>(codes, padded, (const float *)x, scales, count, format);
    } else {
        quant_scales_kernel<<<blocks, QUANT_THREADS>>>(scales, (const bf16 *)x, count, format);
        CUDA_CHECK_LAUNCH();
        quant_codes_kernel<<<device_blocks(padded, 256), 256>>>(codes, padded, (const bf16 *)x, scales, count, format);
    }
    CUDA_CHECK_LAUNCH();
}

extern "C" void device_dequantize(void *x, const void *wire, size_t count, DType dtype, QuantFormat format) {
    check_quant(format, dtype, count);
    if (count == 0) return;
    const float *scales = (const float *)wire;
    const uint8_t *codes = (const uint8_t *)wire + 4 * quant_blocks(count, format.block);
    if (dtype == DTYPE_FP32)
        dequantize_kernel<<<device_blocks(count, 256), 256>>>((float *)x, scales, codes, count, format);
    else dequantize_kernel<<<device_blocks(count, 256), 256>>>((bf16 *)x, scales, codes, count, format);
    CUDA_CHECK_LAUNCH();
}
