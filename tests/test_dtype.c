// bf16: rounding to nearest even on edge values, exact widening, the device's
// bf16 arithmetic (CPU build), AdamW on a bf16 run's master and working copy, and
// the products on bf16 operands (product_bf16; matmul_forward and _backward in a
// bf16 run, models/bf16_products.h).
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "device/device.h"
#include "device/dtype.h"
#include "device/optim.h"
#include "models/gpt2.h"
#include "models/gpt2_ops.h"
#include "tests/check_main.h"

static float float_of_bits(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static bf16 round_bits(uint32_t bits) { return bf16_from_float(float_of_bits(bits)); }

START_TEST(test_exact_values_keep_their_bits) {
    ck_assert_uint_eq(bf16_from_float(1.0f), 0x3F80);
    ck_assert_uint_eq(bf16_from_float(-2.0f), 0xC000);
    ck_assert_uint_eq(bf16_from_float(0.0f), 0x0000);
    ck_assert_uint_eq(bf16_from_float(-0.0f), 0x8000);
    ck_assert_uint_eq(bf16_from_float(0.005859375f), 0x3BC0);  // 1.5 * 2^-8
}
END_TEST

START_TEST(test_ties_go_to_even) {
    // 1 + 2^-8 is halfway between 0x3F80 (even) and 0x3F81: down to the even one
    ck_assert_uint_eq(round_bits(0x3F808000u), 0x3F80);
    // halfway between 0x3F81 (odd) and 0x3F82 (even): up
    ck_assert_uint_eq(round_bits(0x3F818000u), 0x3F82);
    // a hair either side of the tie goes to the nearer
    ck_assert_uint_eq(round_bits(0x3F808001u), 0x3F81);
    ck_assert_uint_eq(round_bits(0x3F807FFFu), 0x3F80);
    // negative ties mirror the positive ones
    ck_assert_uint_eq(round_bits(0xBF808000u), 0xBF80);
    ck_assert_uint_eq(round_bits(0xBF818000u), 0xBF82);
    // not truncation: 1 + 3 * 2^-9 is nearer 0x3F81 than 0x3F80
    ck_assert_uint_eq(bf16_from_float(1.0f + 3.0f / 512.0f), 0x3F81);
    // a carry out of the mantissa moves the exponent: 1.9999 -> 2
    ck_assert_uint_eq(round_bits(0x3FFFFFFFu), 0x4000);
}
END_TEST

START_TEST(test_subnormals_round_like_the_rest) {
    ck_assert_uint_eq(round_bits(0x00010000u), 0x0001);  // the smallest bf16 subnormal, exact
    ck_assert_uint_eq(round_bits(0x00000001u), 0x0000);  // the smallest float subnormal: to zero
    ck_assert_uint_eq(round_bits(0x00008000u), 0x0000);  // tie, to even (0)
    ck_assert_uint_eq(round_bits(0x00018000u), 0x0002);  // tie, to even (2)
    ck_assert_uint_eq(round_bits(0x007FFFFFu), 0x0080);  // the largest subnormal rounds up to the smallest normal
    ck_assert_uint_eq(round_bits(0x80008001u), 0x8001);  // negative, above the tie
}
END_TEST

START_TEST(test_infinities_and_overflow) {
    ck_assert_uint_eq(bf16_from_float(INFINITY), 0x7F80);
    ck_assert_uint_eq(bf16_from_float(-INFINITY), 0xFF80);
    ck_assert_uint_eq(round_bits(0x7F7F7FFFu), 0x7F7F);  // below the tie: bf16's largest finite value
    ck_assert_uint_eq(round_bits(0x7F7F8000u), 0x7F80);  // tie next to an odd mantissa: up, to infinity
    ck_assert_uint_eq(round_bits(0x7F7FFFFFu), 0x7F80);  // float's largest finite value overflows
    ck_assert_uint_eq(round_bits(0xFF7FFFFFu), 0xFF80);
}
END_TEST

START_TEST(test_nan_stays_nan_with_its_sign) {
    ck_assert_uint_eq(round_bits(0x7FC00000u), 0x7FC0);  // the default quiet NaN
    ck_assert_uint_eq(round_bits(0x7F800001u), 0x7FC0);  // payload only in the low bits: not infinity
    ck_assert_uint_eq(round_bits(0x7FFFFFFFu), 0x7FFF);  // would carry into the sign if rounded
    ck_assert_uint_eq(round_bits(0xFF800001u), 0xFFC0);
    ck_assert(isnan(bf16_to_float(round_bits(0x7F800001u))));
}
END_TEST

START_TEST(test_every_bf16_widens_exactly_and_back) {
    for (uint32_t b = 0; b < 65536; b++) {
        float f = bf16_to_float((bf16)b);
        uint32_t bits;
        memcpy(&bits, &f, sizeof bits);
        ck_assert_uint_eq(bits, b << 16);
        if (!isnan(f)) ck_assert_uint_eq(bf16_from_float(f), b);
    }
}
END_TEST

START_TEST(test_device_conversions_and_sums) {
    float wide[4] = {1.0f, 1.0f + 3.0f / 512.0f, -0.0f, 1e-40f};
    bf16 narrow[4], acc[2] = {0x3F80, 0x3F80};  // 1, 1
    device_round(narrow, wide, 4);
    ck_assert_uint_eq(narrow[1], 0x3F81);
    ck_assert_uint_eq(narrow[2], 0x8000);
    float back[4];
    device_widen(back, narrow, 4);
    ck_assert_float_eq(back[1], 1.0078125f);
    // 1 + 2^-8 is a tie (stays 1); 1 + 3 * 2^-9 rounds up
    float add[2] = {1.0f / 256.0f, 3.0f / 512.0f};
    device_add_rounded(acc, add, 2);
    ck_assert_uint_eq(acc[0], 0x3F80);
    ck_assert_uint_eq(acc[1], 0x3F81);
    bf16 x[2] = {0x3F80, 0x3F80}, y[2] = {0x3B80, 0x3BC0};  // 2^-8, 1.5 * 2^-8
    device_add_as(x, y, 2, DTYPE_BF16);
    ck_assert_uint_eq(x[0], 0x3F80);
    ck_assert_uint_eq(x[1], 0x3F81);
    ck_assert_double_eq(device_sum_squares_as(y, 2, DTYPE_BF16), pow(2, -16) + pow(1.5 * pow(2, -8), 2));
    device_scale_as(x, 2, DTYPE_BF16, 2.0f);
    ck_assert_uint_eq(x[1], 0x4001);
}
END_TEST

START_TEST(test_adamw_on_a_master_with_bf16_gradients) {
    // the master follows fp32 AdamW on the widened gradients exactly; the working
    // copy is the master rounded
    float master[3] = {0.3f, -1.7f, 2.5f}, reference[3], grads[3], m1[3] = {0}, v1[3] = {0}, m2[3] = {0}, v2[3] = {0};
    memcpy(reference, master, sizeof master);
    bf16 grads_bf16[3] = {bf16_from_float(0.11f), bf16_from_float(-3.3f), bf16_from_float(1e-3f)}, working[3];
    for (int i = 0; i < 3; i++) grads[i] = bf16_to_float(grads_bf16[i]);
    AdamWConfig cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    AdamWSpan mixed = adamw_span(master, grads_bf16, DTYPE_BF16, m1, v1, working, 3);
    AdamWSpan plain = adamw_span(reference, grads, DTYPE_FP32, m2, v2, NULL, 3);
    for (int step = 0; step < 3; step++) {
        adamw_step_span(&mixed, cfg);
        adamw_step_span(&plain, cfg);
    }
    for (int i = 0; i < 3; i++) {
        ck_assert_float_eq(master[i], reference[i]);
        ck_assert_uint_eq(working[i], bf16_from_float(master[i]));
    }
    ck_assert(working[0] != 0 && bf16_to_float(working[0]) != master[0]);  // rounding did happen
}
END_TEST

// A fixed walk of bf16 values in [-2, 2), most with all 7 mantissa bits in use.
static void fill_bf16(bf16 *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = bf16_from_float((float)(seed >> 8) / (float)(1u << 23) - 2.0f);
    }
}

// op(X)'s (row, col) element of a row-major matrix with row stride ld.
static float at(const bf16 *X, char trans, int ld, int row, int col) {
    return bf16_to_float(trans == 'T' ? X[(size_t)col * ld + row] : X[(size_t)row * ld + col]);
}

// product_bf16 against the same product in double. A product of two bf16 values
// is exact in fp32 (8 + 8 significant bits), so the only error is the fp32 sum
// of K products plus C: in any order at most gamma = (K+1) u / (1 - (K+1) u) of
// the sum of the magnitudes (u = 2^-24), whatever kernel oneDNN picks or the loop.
// Into a bf16 C that sum is rounded once more: at most 2^-8 of itself.
START_TEST(test_bf16_products_within_the_sums_rounding) {
    const int shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {4, 9, 9}, {17, 3, 64}, {65, 33, 130}, {8, 70, 1}};
    const char trans[][2] = {{'N', 'T'}, {'N', 'N'}, {'T', 'N'}, {'T', 'T'}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            for (int beta = 0; beta <= 1; beta++)
                for (int c_bf16 = 0; c_bf16 <= 1; c_bf16++) {
                    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                    char ta = trans[t][0], tb = trans[t][1];
                    int lda = ta == 'T' ? M : K, ldb = tb == 'T' ? K : N;
                    bf16 *A = malloc((size_t)M * K * sizeof(bf16)), *B = malloc((size_t)K * N * sizeof(bf16));
                    float *C = malloc((size_t)M * N * sizeof(float)), *C0 = malloc((size_t)M * N * sizeof(float));
                    bf16 *C16 = malloc((size_t)M * N * sizeof(bf16));
                    fill_bf16(A, (size_t)M * K, 7u + (uint32_t)s);
                    fill_bf16(B, (size_t)K * N, 99u + (uint32_t)t);
                    for (int i = 0; i < M * N; i++) {
                        C[i] = C0[i] = 0.25f * (float)(i % 7) - 0.5f;  // exact in bf16
                        C16[i] = bf16_from_float(C0[i]);
                    }
                    product_bf16(ta, tb, M, N, K, A, lda, B, ldb, (float)beta, c_bf16 ? (void *)C16 : C,
                                 c_bf16 ? DTYPE_BF16 : DTYPE_FP32, N);
                    double u = ldexp(1, -24), gamma = (K + 1) * u / (1 - (K + 1) * u);
                    for (int m = 0; m < M; m++)
                        for (int n = 0; n < N; n++) {
                            double exact = beta ? C0[m * N + n] : 0, magnitude = fabs(exact);
                            for (int k = 0; k < K; k++) {
                                double p = (double)at(A, ta, lda, m, k) * at(B, tb, ldb, k, n);
                                exact += p, magnitude += fabs(p);
                            }
                            double got = c_bf16 ? bf16_to_float(C16[m * N + n]) : C[m * N + n];
                            double bound = gamma * magnitude;
                            if (c_bf16) bound += ldexp(1, -8) * (fabs(exact) + gamma * magnitude);
                            ck_assert_msg(fabs(got - exact) <= bound,
                                          "%c%c %dx%dx%d beta %d, C %s: C[%d,%d] = %.9g, exactly %.9g", ta, tb, M, N,
                                          K, beta, c_bf16 ? "bf16" : "fp32", m, n, got, exact);
                        }
                    free(A), free(B), free(C), free(C0), free(C16);
                }
}
END_TEST

// Into a bf16 C the fp32 sum, C's own value included, is rounded once. C = 1 and
// a product of 2^-8 + 2^-16: 1 + 2^-8 + 2^-16 lies above the midpoint between 1
// and 1 + 2^-7, its bf16 neighbours, so it rounds up. Rounding the product first
// (to 2^-8, a tie gone to even) and then the sum (1 + 2^-8, a tie again) gives 1.
START_TEST(test_bf16_c_is_rounded_once) {
    const bf16 a[2] = {bf16_from_float(0x1p-4f), bf16_from_float(0x1p-8f)};
    const bf16 b[2] = {bf16_from_float(0x1p-4f), bf16_from_float(0x1p-8f)};
    for (int ta = 0; ta <= 1; ta++) {  // A (1,2) or its transpose (2,1) read as (1,2)
        bf16 c = bf16_from_float(1.0f);
        product_bf16(ta ? 'T' : 'N', 'T', 1, 1, 2, a, ta ? 1 : 2, b, 2, 1, &c, DTYPE_BF16, 1);
        ck_assert_msg(bf16_to_float(c) == 1.0f + 0x1p-7f, "%c: 1 + (2^-8 + 2^-16) in bf16 is %.9g, not 1 + 2^-7",
                      ta ? 'T' : 'N', bf16_to_float(c));
    }
}
END_TEST

// A bf16 run's matmul_forward and _backward multiply the weight as it is (bf16)
// and round inp and dout to bf16 first: the result is the product of the rounded
// values (within the sums' rounding, as above), not of the fp32 ones; the bias's
// gradient sums dout unrounded; the weight's gradient is added into the run's
// gradients as kept, fp32 or bf16 (then rounded once). A NaN in one input row
// stays in that row's outputs.
START_TEST(test_matmul_rounds_its_operands) {
    enum { B = 2, T = 3, C = 9, OC = 5, ROWS = B * T };
    float inp[ROWS * C], rw[OC * C], bias[OC], dout[ROWS * OC];
    float rinp[ROWS * C], rdout[ROWS * OC];
    bf16 w[OC * C];
    for (int i = 0; i < ROWS * C; i++) inp[i] = 0.1f + 0.0123457f * (float)i, rinp[i] = bf16_to_float(bf16_from_float(inp[i]));
    for (int i = 0; i < OC * C; i++) w[i] = bf16_from_float(0.3f - 0.0098765f * (float)i), rw[i] = bf16_to_float(w[i]);
    for (int i = 0; i < ROWS * OC; i++)
        dout[i] = 0.05f * (float)(i % 4) - 0.071f, rdout[i] = bf16_to_float(bf16_from_float(dout[i]));
    for (int o = 0; o < OC; o++) bias[o] = 0.01f * (float)o;
    inp[C] = NAN;  // row 1
    Bf16Products products = {.operands = malloc(gpt2_product_operands(ROWS, C, OC, 1) * sizeof(bf16)),
                             .grad_dtype = DTYPE_FP32};
    float out[ROWS * OC], dinp[ROWS * C] = {0}, dw[OC * C] = {0}, db[OC] = {0};
    matmul_forward(out, inp, w, bias, B, T, C, OC, &products);
    double u = ldexp(1, -24), gamma = (C + 2) * u / (1 - (C + 2) * u);
    for (int r = 0; r < ROWS; r++)
        for (int o = 0; o < OC; o++) {
            if (r == 1) {
                ck_assert_msg(isnan(out[r * OC + o]), "the NaN row's output %d is %g", o, out[r * OC + o]);
                continue;
            }
            double exact = bias[o], magnitude = fabs(bias[o]), unrounded = bias[o];
            for (int c = 0; c < C; c++) {
                exact += (double)rinp[r * C + c] * rw[o * C + c], magnitude += fabs((double)rinp[r * C + c] * rw[o * C + c]);
                unrounded += (double)inp[r * C + c] * rw[o * C + c];
            }
            ck_assert_msg(fabs(out[r * OC + o] - exact) <= gamma * magnitude, "out[%d,%d] = %.9g, of the rounded %.9g",
                          r, o, out[r * OC + o], exact);
            ck_assert_msg(fabs(out[r * OC + o] - unrounded) > gamma * magnitude, "out[%d,%d]: inp was not rounded", r,
                          o);
        }
    inp[C] = 1.0f, rinp[C] = 1.0f;
    matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC, &products);
    bf16 dw16[OC * C];
    for (int i = 0; i < OC * C; i++) dw16[i] = bf16_from_float(0.5f);
    products.grad_dtype = DTYPE_BF16;
    float dinp16[ROWS * C] = {0}, db16[OC] = {0};
    matmul_backward(dinp16, dw16, db16, dout, inp, w, B, T, C, OC, &products);
    for (int o = 0; o < OC; o++) {
        float sum = 0;
        for (int r = 0; r < ROWS; r++) sum += dout[r * OC + o];
        ck_assert_msg(db[o] == sum, "dbias[%d] = %.9g sums the unrounded dout, %.9g", o, db[o], sum);
        for (int c = 0; c < C; c++) {
            double exact = 0, magnitude = 0;
            for (int r = 0; r < ROWS; r++)
                exact += (double)rdout[r * OC + o] * rinp[r * C + c], magnitude += fabs((double)rdout[r * OC + o] * rinp[r * C + c]);
            ck_assert_msg(fabs(dw[o * C + c] - exact) <= gamma * magnitude + 1e-30, "dweight[%d,%d] = %.9g, exactly %.9g",
                          o, c, dw[o * C + c], exact);
            double got = bf16_to_float(dw16[o * C + c]), exact16 = 0.5 + exact;  // added into 0.5, rounded once
            ck_assert_msg(fabs(got - exact16) <= gamma * (magnitude + 0.5) + ldexp(1, -8) * fabs(exact16),
                          "bf16 dweight[%d,%d] = %.9g, exactly %.9g", o, c, got, exact16);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < C; c++) {
            double exact = 0, magnitude = 0;
            for (int o = 0; o < OC; o++)
                exact += (double)rdout[r * OC + o] * rw[o * C + c], magnitude += fabs((double)rdout[r * OC + o] * rw[o * C + c]);
            ck_assert_msg(fabs(dinp[r * C + c] - exact) <= gamma * magnitude + 1e-30, "dinp[%d,%d] = %.9g, exactly %.9g",
                          r, c, dinp[r * C + c], exact);
            ck_assert_msg(dinp16[r * C + c] == dinp[r * C + c], "dinp[%d,%d] depends on the gradients' dtype", r, c);
        }
    free(products.operands);
}
END_TEST

// The embedding on bf16 tables as kept: the forward reads exactly the widened
// values; the backward gives the bits of the fp32 copy it replaces, zeroed,
// added into position by position, then added to the bf16 gradient and rounded
// once (the sums run in the same order), with repeated tokens, channels past
// one summing chunk (C = 300), and a NaN in one position.
START_TEST(test_encoder_on_bf16_tables_as_kept) {
    enum { B = 3, T = 5, C = 300, V = 11, BT = B * T };
    int inp[BT], order[BT];
    for (int i = 0; i < BT; i++) inp[i] = (i * 7) % 4 + (i == 9 ? 6 : 0);  // tokens 0..3 repeat, 6 once
    gpt2_positions_by_token(order, inp, BT, V);
    bf16 *wte = malloc(V * C * sizeof(bf16)), *wpe = malloc(T * C * sizeof(bf16));
    bf16 *dwte = malloc(V * C * sizeof(bf16)), *dwpe = malloc(T * C * sizeof(bf16));
    float *wide_wte = malloc(V * C * sizeof(float)), *wide_wpe = malloc(T * C * sizeof(float));
    float *copy_wte = calloc(V * C, sizeof(float)), *copy_wpe = calloc(T * C, sizeof(float));
    float *out = malloc(BT * C * sizeof(float)), *want = malloc(BT * C * sizeof(float));
    float *dout = malloc(BT * C * sizeof(float));
    fill_bf16(wte, V * C, 1), fill_bf16(wpe, T * C, 2), fill_bf16(dwte, V * C, 3), fill_bf16(dwpe, T * C, 4);
    for (int i = 0; i < V * C; i++) wide_wte[i] = bf16_to_float(wte[i]);
    for (int i = 0; i < T * C; i++) wide_wpe[i] = bf16_to_float(wpe[i]);
    for (int i = 0; i < BT * C; i++) dout[i] = 0.001f * (float)((i * 37) % 101) - 0.05f;  // not bf16 values
    dout[4 * C + 7] = NAN;
    encoder_forward(out, inp, wte, wpe, DTYPE_BF16, B, T, C);
    encoder_forward(want, inp, wide_wte, wide_wpe, DTYPE_FP32, B, T, C);
    ck_assert_msg(memcmp(out, want, BT * C * sizeof(float)) == 0, "the forward on bf16 tables reads other values");
    encoder_backward(copy_wte, copy_wpe, DTYPE_FP32, dout, inp, NULL, B, T, C);
    bf16 *want_wte = malloc(V * C * sizeof(bf16)), *want_wpe = malloc(T * C * sizeof(bf16));
    for (int i = 0; i < V * C; i++) want_wte[i] = bf16_from_float(bf16_to_float(dwte[i]) + copy_wte[i]);
    for (int i = 0; i < T * C; i++) want_wpe[i] = bf16_from_float(bf16_to_float(dwpe[i]) + copy_wpe[i]);
    encoder_backward(dwte, dwpe, DTYPE_BF16, dout, inp, order, B, T, C);
    for (int i = 0; i < V * C; i++)
        ck_assert_msg(dwte[i] == want_wte[i], "dwte[%d,%d] = %04x, the fp32 copy's rounding %04x", i / C, i % C,
                      dwte[i], want_wte[i]);
    for (int i = 0; i < T * C; i++)
        ck_assert_msg(dwpe[i] == want_wpe[i], "dwpe[%d,%d] = %04x, the fp32 copy's rounding %04x", i / C, i % C,
                      dwpe[i], want_wpe[i]);
    ck_assert(isnan(bf16_to_float(dwpe[4 * C + 7])) && isnan(bf16_to_float(dwte[inp[4] * C + 7])));
    free(wte), free(wpe), free(dwte), free(dwpe), free(wide_wte), free(wide_wpe), free(copy_wte), free(copy_wpe);
    free(out), free(want), free(dout), free(want_wte), free(want_wpe);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dtype");
    TCase *tc = tcase_create("bf16");
    tcase_add_test(tc, test_exact_values_keep_their_bits);
    tcase_add_test(tc, test_ties_go_to_even);
    tcase_add_test(tc, test_subnormals_round_like_the_rest);
    tcase_add_test(tc, test_infinities_and_overflow);
    tcase_add_test(tc, test_nan_stays_nan_with_its_sign);
    tcase_add_test(tc, test_every_bf16_widens_exactly_and_back);
    tcase_add_test(tc, test_device_conversions_and_sums);
    tcase_add_test(tc, test_adamw_on_a_master_with_bf16_gradients);
    tcase_add_test(tc, test_bf16_products_within_the_sums_rounding);
    tcase_add_test(tc, test_bf16_c_is_rounded_once);
    tcase_add_test(tc, test_matmul_rounds_its_operands);
    tcase_add_test(tc, test_encoder_on_bf16_tables_as_kept);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
