// quantize.h: block-wise symmetric quantization to int8 or int4, the forms
// ZeRO++'s quantized collectives put numbers in for the wire (weights: qwZ,
// gradients: qgZ).
//
// A run of `count` numbers is cut into blocks of `block` numbers (the last one
// shorter). Each block travels as one fp32 scale, its largest magnitude over
// Q (127 for int8, 7 for int4), and one code a number, the number over the scale
// rounded to the nearest integer (ties to even):
//
//   scale = max|x| / Q      code = rint(x / scale)  (-Q..Q)      x' = code * scale
//
//   wire of a run: [ scale 0 | scale 1 | ... ] [ codes ... | pad to 4 bytes ]
//                    4 bytes a block             int8: a byte a number; int4: two
//                                                numbers a byte, the first in the low half
//
// so a run of n numbers is 4 ceil(n/block) + n (int8) or + ceil(n/2) (int4) bytes,
// rounded up to 4, instead of 4n (fp32) or 2n (bf16). The error of a number is at
// most half a step of its block's scale, plus the roundings of the division and
// the product:
//
//   |x' - x| <= scale (1/2 + 2 Q u)          u = 2^-24, fp32's unit roundoff
//
// while the scale is a normal float (max|x| >= Q FLT_MIN; below, codes may be 0
// and the error is at most max|x|). A bf16 run rounds x' to bf16 on arrival, at
// most 2^-8 |x'| more: <= scale (1/2 + 2 Q u + (Q + 1/2) 2^-8) in all. One
// non-finite number in a block makes its scale NaN and all its numbers arrive
// NaN: a diverged model stays visibly diverged.
//
// The functions below are the same on the host and, compiled by nvcc, in the
// CUDA build's kernels: a GPU's wire is bit for bit a CPU's.
#ifndef SHARDLAB_QUANTIZE_H
#define SHARDLAB_QUANTIZE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "device/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

// How a collective's numbers travel: as they are (bits 0), or as int8 (bits 8)
// or int4 (bits 4) codes in blocks of `block` numbers with a scale each.
typedef struct {
    int bits;
    size_t block;
} QuantFormat;

// Q: the largest code.
static inline DTYPE_HOST_DEVICE int quant_max_code(int bits) { return bits == 4 ? 7 : 127; }
static inline DTYPE_HOST_DEVICE size_t quant_blocks(size_t count, size_t block) { return (count + block - 1) / block; }
// Bytes of the codes of a run, and of its whole wire: the scales, then the codes,
// padded to 4 bytes so that the next run's scales are aligned.
static inline DTYPE_HOST_DEVICE size_t quant_code_bytes(size_t count, int bits) {
    return bits == 4 ? (count + 1) / 2 : count;
}
static inline DTYPE_HOST_DEVICE size_t quant_wire_bytes(size_t count, QuantFormat format) {
    return 4 * quant_blocks(count, format.block) + (quant_code_bytes(count, format.bits) + 3) / 4 * 4;
}
// A block's scale from its largest magnitude, NaN if one of its numbers is not finite.
static inline DTYPE_HOST_DEVICE float quant_scale(float max_magnitude, int all_finite, int bits) {
    return all_finite ? max_magnitude / (float)quant_max_code(bits) : NAN;
}
// A number's code in its block (0 where the scale is 0, NaN or not normal enough to divide by).
static inline DTYPE_HOST_DEVICE int8_t quant_code(float x, float scale, int bits) {
    float top = (float)quant_max_code(bits);
    float q = scale > 0 ? rintf(x / scale) : 0.0f;
    q = q > top ? top : q;    // |x| <= max|x| keeps it within +-Q but for
    q = q < -top ? -top : q;  // a scale too small to be normal
    return (int8_t)(int32_t)q;
}
static inline DTYPE_HOST_DEVICE float quant_value(int8_t code, float scale) { return (float)code * scale; }
// int4: two codes in a byte, the first in the low half; and a half back, sign and all.
static inline DTYPE_HOST_DEVICE uint8_t quant_pair(int8_t first, int8_t second) {
    return (uint8_t)(((uint8_t)first & 0x0F) | ((uint8_t)second << 4));
}
static inline DTYPE_HOST_DEVICE int8_t quant_half(uint8_t byte, int high) {
    int v = high ? byte >> 4 : byte & 0x0F;
    return (int8_t)(v >= 8 ? v - 16 : v);
}

// The host's quantizer: `count` numbers of `dtype` (fp32 or bf16) at x into
// quant_wire_bytes(count, format) bytes at wire, and back (rounded to dtype).
// device_quantize and device_dequantize (device.h) are these in the CPU build.
void quantize_host(void *wire, const void *x, size_t count, DType dtype, QuantFormat format);
void dequantize_host(void *x, const void *wire, size_t count, DType dtype, QuantFormat format);

#ifdef __cplusplus
}
#endif

#endif
