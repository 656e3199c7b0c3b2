// The block-wise int8 and int4 quantizer of ZeRO++'s collectives (device/quantize.h):
// its error bound block by block, its wire's size and bytes, what an all-zero,
// a tiny and a non-finite block become, int4's packing, and the CPU build's device calls.
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/quantize.h"
#include "tests/check_main.h"
#include "util/mt19937.h"

#define UNIT_ROUNDOFF 0x1p-24f  // fp32's u
#define INT8_BLOCKS_OF(b) ((QuantFormat){8, (b)})

// Numbers of very different sizes, block by block: a block's scale is set by
// its largest, and the small ones beside it take the same step.
static void fill(float *x, size_t count, uint32_t seed) {
    Mt19937 rng;
    mt19937_seed(&rng, seed);
    for (size_t i = 0; i < count; i++) {
        float uniform = (float)(mt19937_next(&rng) >> 8) * 0x1p-24f;  // [0, 1)
        float magnitude = powf(10.0f, -4.0f + 5.0f * uniform);          // 1e-4 .. 10
        x[i] = (mt19937_next(&rng) & 1 ? -1.0f : 1.0f) * magnitude;
    }
}

static const float *scales_of(const void *wire) { return wire; }
// Number i's code, int8 or int4.
static int code_of(const void *wire, size_t count, QuantFormat f, size_t i) {
    const uint8_t *codes = (const uint8_t *)wire + 4 * quant_blocks(count, f.block);
    return f.bits == 8 ? (int8_t)codes[i] : quant_half(codes[i / 2], (int)(i & 1));
}

// Every number back within scale (1/2 + 2 Q u) of itself (bf16: + (Q + 1/2) 2^-8 more),
// with its block's scale, the largest magnitude over Q, and codes in -Q..Q.
static void check_round_trip(size_t count, QuantFormat f, DType dtype, uint32_t seed) {
    float *x = malloc(count * sizeof(float));
    fill(x, count, seed);
    bf16 *xb = malloc(count * sizeof(bf16));
    if (dtype == DTYPE_BF16)
        for (size_t i = 0; i < count; i++) {
            xb[i] = bf16_from_float(x[i]);
            x[i] = bf16_to_float(xb[i]);  // the numbers the run holds
        }
    void *in = dtype == DTYPE_FP32 ? (void *)x : (void *)xb;
    int Q = f.bits == 8 ? 127 : 7;
    size_t bytes = quant_wire_bytes(count, f), codes = f.bits == 8 ? count : (count + 1) / 2;
    ck_assert_uint_eq(bytes, 4 * ((count + f.block - 1) / f.block) + (codes + 3) / 4 * 4);
    unsigned char *wire = malloc(bytes);
    memset(wire, 0xAB, bytes);
    quantize_host(wire, in, count, dtype, f);
    for (size_t i = 4 * quant_blocks(count, f.block) + codes; i < bytes; i++) ck_assert_uint_eq(wire[i], 0);  // padding
    if (f.bits == 4 && count % 2)  // an odd run's last high half
        ck_assert_int_eq(wire[4 * quant_blocks(count, f.block) + count / 2] >> 4, 0);
    float *y = malloc(count * sizeof(float));
    bf16 *yb = malloc(count * sizeof(bf16));
    dequantize_host(dtype == DTYPE_FP32 ? (void *)y : (void *)yb, wire, count, dtype, f);
    if (dtype == DTYPE_BF16)
        for (size_t i = 0; i < count; i++) y[i] = bf16_to_float(yb[i]);
    const float *scales = scales_of(wire);
    float slack = 0.5f + 2 * Q * UNIT_ROUNDOFF + (dtype == DTYPE_BF16 ? (Q + 0.5f) * 0x1p-8f : 0.0f);
    for (size_t b = 0; b * f.block < count; b++) {
        size_t begin = b * f.block, end = begin + f.block < count ? begin + f.block : count;
        float largest = 0;
        for (size_t i = begin; i < end; i++) largest = fmaxf(largest, fabsf(x[i]));
        ck_assert_float_eq(scales[b], largest / (float)Q);
        int reached = 0;
        for (size_t i = begin; i < end; i++) {
            ck_assert_msg(fabsf(y[i] - x[i]) <= scales[b] * slack,
                          "%s to int%d, %zu in blocks of %zu: number %zu is %.9g, back as %.9g: off by %.3g, over "
                          "the bound %.3g of its block's scale %.3g", dtype_name(dtype), f.bits, count, f.block, i,
                          x[i], y[i], fabsf(y[i] - x[i]), scales[b] * slack, scales[b]);
            ck_assert_int_le(abs(code_of(wire, count, f, i)), Q);
            reached |= abs(code_of(wire, count, f, i)) == Q;
        }
        ck_assert_msg(reached, "block %zu: its largest number has code +-%d", b, Q);
    }
    free(x), free(xb), free(wire), free(y), free(yb);
}

START_TEST(test_error_within_the_bound_block_by_block) {
    size_t blocks[] = {1, 7, 64, 4096};
    size_t counts[] = {1, 3, 63, 64, 65, 1000, 9001};
    for (int bits = 8; bits >= 4; bits -= 4)
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++)
            for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
                QuantFormat f = {bits, blocks[b]};
                check_round_trip(counts[c], f, DTYPE_FP32, (uint32_t)(bits * 1000 + b * 100 + c));
                check_round_trip(counts[c], f, DTYPE_BF16, (uint32_t)(bits * 1000 + b * 100 + c + 50));
            }
}
END_TEST

// A block's numbers take its own scale, not a neighbour's: a block of 1e-3's
// beside a block of 1e3's comes back to three digits, not to zero.
START_TEST(test_each_block_its_own_scale) {
    float x[8] = {1e3f, -2e3f, 5e2f, 1e3f, 1e-3f, -2e-3f, 1.5e-3f, 1e-3f}, y[8];
    unsigned char wire[64];
    quantize_host(wire, x, 8, DTYPE_FP32, INT8_BLOCKS_OF(4));
    dequantize_host(y, wire, 8, DTYPE_FP32, INT8_BLOCKS_OF(4));
    for (int i = 4; i < 8; i++) ck_assert_float_le(fabsf(y[i] - x[i]), 2e-3f / 127 * 0.51f);
    ck_assert_float_eq(scales_of(wire)[0], 2e3f / 127);
    ck_assert_float_eq(scales_of(wire)[1], 2e-3f / 127);
}
END_TEST

START_TEST(test_zero_tiny_and_exact_blocks) {
    float zeros[5] = {0, -0.0f, 0, 0, 0}, y[5];
    unsigned char wire[32];
    quantize_host(wire, zeros, 5, DTYPE_FP32, INT8_BLOCKS_OF(5));
    dequantize_host(y, wire, 5, DTYPE_FP32, INT8_BLOCKS_OF(5));
    ck_assert_float_eq(scales_of(wire)[0], 0.0f);
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], 0.0f);
    // a scale too small to be normal: codes may all be 0, off by at most the largest number
    float tiny[3] = {1e-40f, -3e-41f, 2e-42f};
    quantize_host(wire, tiny, 3, DTYPE_FP32, INT8_BLOCKS_OF(3));
    dequantize_host(y, wire, 3, DTYPE_FP32, INT8_BLOCKS_OF(3));
    for (int i = 0; i < 3; i++) ck_assert_float_le(fabsf(y[i] - tiny[i]), 1e-40f);
    // multiples of a power-of-two step come back exactly: 127 * 2^-7 and its steps
    float exact[4] = {127.0f / 128, -64.0f / 128, 1.0f / 128, 0};
    quantize_host(wire, exact, 4, DTYPE_FP32, INT8_BLOCKS_OF(4));
    dequantize_host(y, wire, 4, DTYPE_FP32, INT8_BLOCKS_OF(4));
    for (int i = 0; i < 4; i++) ck_assert_float_eq(y[i], exact[i]);
}
END_TEST

// A NaN or an infinity makes its block arrive all NaN, and only its block.
START_TEST(test_non_finite_poisons_its_block_only) {
    float specials[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        float x[9] = {1, 2, 3, 4, 5, specials[k], 7, 8, 9}, y[9];
        unsigned char wire[64];
        quantize_host(wire, x, 9, DTYPE_FP32, INT8_BLOCKS_OF(3));
        dequantize_host(y, wire, 9, DTYPE_FP32, INT8_BLOCKS_OF(3));
        for (int i = 0; i < 9; i++) {
            if (i >= 3 && i < 6) ck_assert_msg(isnan(y[i]), "number %d of the poisoned block: NaN", i);
            else ck_assert_float_le(fabsf(y[i] - x[i]), 9.0f / 127 * 0.51f);
        }
    }
}
END_TEST

// The CPU build's device calls are the host's quantizer: the same wire, bit for bit.
START_TEST(test_device_calls_are_the_host_quantizer) {
    float x[300], a[300], b[300];
    fill(x, 300, 7);
    unsigned char w1[400], w2[400];
    ck_assert_uint_le(quant_wire_bytes(300, INT8_BLOCKS_OF(64)), sizeof w1);
    quantize_host(w1, x, 300, DTYPE_FP32, INT8_BLOCKS_OF(64));
    device_quantize(w2, x, 300, DTYPE_FP32, INT8_BLOCKS_OF(64));
    ck_assert_int_eq(memcmp(w1, w2, quant_wire_bytes(300, INT8_BLOCKS_OF(64))), 0);
    dequantize_host(a, w1, 300, DTYPE_FP32, INT8_BLOCKS_OF(64));
    device_dequantize(b, w2, 300, DTYPE_FP32, INT8_BLOCKS_OF(64));
    ck_assert_int_eq(memcmp(a, b, sizeof a), 0);
}
END_TEST

// int4: two codes a byte, the first in the low half, signs kept; 7 steps each side.
START_TEST(test_int4_packs_two_a_byte) {
    float x[5] = {7, -7, 1, -3, 0.49f}, y[5];
    unsigned char wire[16];
    QuantFormat f = {4, 5};
    ck_assert_uint_eq(quant_wire_bytes(5, f), 4 + 4);
    quantize_host(wire, x, 5, DTYPE_FP32, f);
    ck_assert_float_eq(scales_of(wire)[0], 1.0f);
    ck_assert_uint_eq(wire[4], (uint8_t)((7 & 0xF) | ((-7 & 0xF) << 4)));
    ck_assert_uint_eq(wire[5], (uint8_t)((1 & 0xF) | ((-3 & 0xF) << 4)));
    ck_assert_uint_eq(wire[6], 0);  // 0.49 rounds to 0; the missing sixth is 0
    dequantize_host(y, wire, 5, DTYPE_FP32, f);
    float want[5] = {7, -7, 1, -3, 0};
    for (int i = 0; i < 5; i++) ck_assert_float_eq(y[i], want[i]);
    for (int v = -8; v < 8; v++) ck_assert_int_eq(quant_half(quant_pair((int8_t)v, (int8_t)-v), 0), v);
}
END_TEST

int main(void) {
    Suite *s = suite_create("quantize");
    TCase *tc = tcase_create("int8 blocks");
    tcase_add_test(tc, test_error_within_the_bound_block_by_block);
    tcase_add_test(tc, test_each_block_its_own_scale);
    tcase_add_test(tc, test_zero_tiny_and_exact_blocks);
    tcase_add_test(tc, test_non_finite_poisons_its_block_only);
    tcase_add_test(tc, test_int4_packs_two_a_byte);
    tcase_add_test(tc, test_device_calls_are_the_host_quantizer);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
