// dtype.h: the element types of parameters and gradients. fp32 is IEEE single
// precision; bf16 (bfloat16) is its top 16 bits: the same 8-bit exponent, so
// the same range, and 7 mantissa bits instead of 23 (about 3 significant
// digits). A --precision bf16 run keeps the parameters the model reads, and
// that collectives move, in bf16, and fp32 master copies for the optimizer
// (docs/precision.md). int8 is a wire type alone: the bytes of a quantized
// collective (device/quantize.h), never a parameter's or a gradient's type, and
// never summed.
#ifndef SHARDLAB_DTYPE_H
#define SHARDLAB_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DTYPE_FP32 = 0, DTYPE_BF16, DTYPE_INT8 } DType;

typedef uint16_t bf16;  // the bits of a bfloat16

// The conversions below are the same functions on the host and, compiled by
// nvcc, in kernels: the GPU's bf16 arithmetic is bit for bit the CPU's.
#ifdef __CUDACC__
#define DTYPE_HOST_DEVICE __host__ __device__
#else
#define DTYPE_HOST_DEVICE
#endif

static inline size_t dtype_size(DType dtype) { return dtype == DTYPE_BF16 ? 2 : dtype == DTYPE_INT8 ? 1 : 4; }
// "fp32", "bf16" or "int8".
const char *dtype_name(DType dtype);
// Parses "fp32" or "bf16" (the types a run keeps numbers in); returns 0, or -1 for anything else.
int dtype_parse(const char *text, DType *out);

// Element `index` of a buffer of `dtype` elements.
static inline void *dtype_at(void *buffer, size_t index, DType dtype) {
    return (char *)buffer + index * dtype_size(dtype);
}

// Exact: a bf16 is an fp32 whose low 16 bits are zero.
static inline DTYPE_HOST_DEVICE float bf16_to_float(bf16 x) {
    uint32_t bits = (uint32_t)x << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

// Rounds to the nearest bf16, ties to the one with an even last bit (IEEE's
// default rounding): add 0x7FFF, plus 1 when the kept part is odd, and drop the
// low 16 bits. This carries into the exponent where it must (up to infinity
// past bf16's largest finite value) and works unchanged on subnormals. NaN
// would carry into the sign or become infinity, so it is made a quiet NaN
// with its sign instead.
static inline DTYPE_HOST_DEVICE bf16 bf16_from_float(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (bf16)((bits >> 16) | 0x0040u);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (bf16)(bits >> 16);
}

// a + b and x * factor as bf16 arithmetic does them: in fp32, rounded once.
static inline DTYPE_HOST_DEVICE bf16 bf16_add(bf16 a, bf16 b) {
    return bf16_from_float(bf16_to_float(a) + bf16_to_float(b));
}
static inline DTYPE_HOST_DEVICE bf16 bf16_scale(bf16 x, float factor) {
    return bf16_from_float(bf16_to_float(x) * factor);
}

#ifdef __cplusplus
}
#endif

#endif
