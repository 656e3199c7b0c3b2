// quantize.c: the host's block-wise quantizer (quantize.h), block by block: the
// largest magnitude, then the codes; on arrival, code times scale. A bf16 run's
// numbers are widened (exactly) into fp32 first, and rounded back to bf16 last,
// and int4's codes are made as int8's and then packed two a byte, so every form
// takes the one fp32 path.
#include <stdlib.h>
#include <string.h>

#include "device/quantize.h"
#include "util/errors.h"

// The largest |x| of a block, and whether all of it is finite. The magnitude's
// bits, read as an integer, order as the magnitudes do (NaN's above infinity's),
// so an integer maximum finds it: exact, and a loop the compiler vectorises.
static float block_max_magnitude(const float *x, size_t n, int *all_finite) {
    uint32_t top = 0;
    for (size_t i = 0; i < n; i++) {  // vectorised
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        bits &= 0x7FFFFFFFu;
        top = bits > top ? bits : top;
    }
    *all_finite = top < 0x7F800000u;
    float magnitude;
    memcpy(&magnitude, &top, sizeof magnitude);
    return magnitude;
}

static void block_encode(int8_t *codes, const float *x, size_t n, float scale, int bits) {
    if (!(scale > 0)) {  // 0 (an all-zero block), NaN (a non-finite number): every code 0
        memset(codes, 0, n);
        return;
    }
    for (size_t i = 0; i < n; i++) codes[i] = quant_code(x[i], scale, bits);  // vectorised
}

static void block_decode(float *x, const int8_t *codes, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = quant_value(codes[i], scale);  // vectorised
}

// The run's numbers as fp32: x itself, or its bf16 numbers widened into `widened`.
static const float *as_fp32(const void *x, size_t count, DType dtype, float *widened) {
    if (dtype == DTYPE_FP32) return x;
    const bf16 *b = x;
    for (size_t i = 0; i < count; i++) widened[i] = bf16_to_float(b[i]);
    return widened;
}

static void check_format(QuantFormat format, DType dtype) {
    CHECK(format.block > 0 && (format.bits == 8 || format.bits == 4), "quantizing to %d bits in blocks of %zu",
          format.bits, format.block);
    CHECK(dtype == DTYPE_FP32 || dtype == DTYPE_BF16, "quantizing %s numbers: only fp32 and bf16 are", dtype_name(dtype));
}

void quantize_host(void *wire, const void *x, size_t count, DType dtype, QuantFormat format) {
    check_format(format, dtype);
    if (count == 0) return;
    size_t blocks = quant_blocks(count, format.block), code_bytes = quant_code_bytes(count, format.bits);
    float *widened = dtype == DTYPE_FP32 ? NULL : xmalloc(count * sizeof(float));
    const float *values = as_fp32(x, count, dtype, widened);
    float *scales = wire;                                   // (blocks)
    uint8_t *codes = (uint8_t *)((char *)wire + 4 * blocks);  // (code_bytes), then padding
    int8_t *each = format.bits == 8 ? (int8_t *)codes : xmalloc(count + 1);  // a code a number
    for (size_t b = 0, begin = 0; begin < count; b++, begin += format.block) {
        size_t n = count - begin < format.block ? count - begin : format.block;
        int all_finite;
        float magnitude = block_max_magnitude(values + begin, n, &all_finite);
        scales[b] = quant_scale(magnitude, all_finite, format.bits);
        block_encode(each + begin, values + begin, n, scales[b], format.bits);
    }
    if (format.bits == 4) {
        each[count] = 0;  // an odd run's last high half
        for (size_t i = 0; i < code_bytes; i++) codes[i] = quant_pair(each[2 * i], each[2 * i + 1]);  // vectorised
        free(each);
    }
    memset(codes + code_bytes, 0, quant_wire_bytes(count, format) - 4 * blocks - code_bytes);
    free(widened);
}

void dequantize_host(void *x, const void *wire, size_t count, DType dtype, QuantFormat format) {
    check_format(format, dtype);
    if (count == 0) return;
    size_t blocks = quant_blocks(count, format.block);
    float *values = dtype == DTYPE_FP32 ? x : xmalloc(count * sizeof(float));
    const float *scales = wire;
    const uint8_t *codes = (const uint8_t *)((const char *)wire + 4 * blocks);
    int8_t *each = format.bits == 8 ? (int8_t *)codes : xmalloc(count + 1);
    if (format.bits == 4)
        for (size_t i = 0; i < count; i++) each[i] = quant_half(codes[i / 2], (int)(i & 1));
    for (size_t b = 0, begin = 0; begin < count; b++, begin += format.block)
        block_decode(values + begin, each + begin, count - begin < format.block ? count - begin : format.block, scales[b]);
    if (format.bits == 4) free(each);
    if (dtype == DTYPE_BF16) {
        bf16 *out = x;
        for (size_t i = 0; i < count; i++) out[i] = bf16_from_float(values[i]);
        free(values);
    }
}
