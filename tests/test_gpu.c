// Every CUDA layer against the CPU layer on the same inputs (CUDA build only,
// needs a GPU). fp32 with TF32 switched off: each output tensor must agree to
// a relative error of 1e-3 (largest difference over largest reference value);
// the fused attention, whose products may round to TF32 or bf16 on purpose, to
// the tolerance its arithmetic allows (attention_tolerance).
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "device/optim.h"
#include "models/gpt2.h"
#include "models/gpt2_cuda_ops.h"
#include "models/gpt2_ops.h"
#include "tests/check_main.h"

static MemAccount mem;

static float *random_host(size_t n, unsigned seed, float scale) {
    float *a = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        a[i] = scale * ((float)(seed >> 8) / 16777216.0f * 2.0f - 1.0f);
    }
    return a;
}

static float *to_device(const float *host, size_t n) {
    float *d = device_alloc(&mem, MEM_ACTIVATIONS, n);
    device_from_host(d, host, n);
    return d;
}

static int *ints_to_device(const int *host, size_t n) {
    int *d = device_alloc_ints(&mem, MEM_ACTIVATIONS, n);
    device_ints_from_host(d, host, n);
    return d;
}

// max |gpu - cpu| / max |cpu| over the tensor, with the GPU copy read back.
static void assert_close(const char *what, const float *device, const float *cpu, size_t n) {
    float *got = malloc(n * sizeof(float));
    device_to_host(got, device, n);
    double max_diff = 0, max_ref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        max_diff = fmax(max_diff, fabs((double)got[i] - cpu[i]));
        max_ref = fmax(max_ref, fabs((double)cpu[i]));
    }
    free(got);
    ck_assert_msg(max_diff / max_ref <= 1e-3, "%s: relative error %.3e", what, max_diff / max_ref);
}

// max |gpu - cpu| / max |cpu|, failing on any value that is not finite (an
// unwritten output stays NaN: the outputs start poisoned).
static double relative_error(const float *device, const float *cpu, size_t n) {
    float *got = malloc(n * sizeof(float));
    device_to_host(got, device, n);
    double max_diff = 0, max_ref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(got[i]), "element %zu is %f", i, got[i]);
        max_diff = fmax(max_diff, fabs((double)got[i] - cpu[i]));
        max_ref = fmax(max_ref, fabs((double)cpu[i]));
    }
    free(got);
    return max_diff / max_ref;
}

enum { B = 2, T = 17, C = 48, NH = 3, OC = 80, V = 101, Vp = 128 };

// On bf16 tables, into bf16 gradients (a bf16 run's, as kept): the CPU's bits, the
// sums running in the same order on both.
static void check_encoder_bf16(const float *wte, const float *wpe, const float *dout, const int *inp,
                               const int *order) {
    size_t n_wte = Vp * C, n_wpe = T * C, n_out = B * T * C;
    bf16 *wte16 = malloc(n_wte * 2), *wpe16 = malloc(n_wpe * 2), *dwte16 = malloc(n_wte * 2), *dwpe16 = malloc(n_wpe * 2);
    float *wide = malloc(n_wte * 4), *got = malloc(n_wte * 4), *out = malloc(n_out * 4);
    for (size_t i = 0; i < n_wte; i++) wte16[i] = bf16_from_float(wte[i]), dwte16[i] = bf16_from_float(wte[i] / 8);
    for (size_t i = 0; i < n_wpe; i++) wpe16[i] = bf16_from_float(wpe[i]), dwpe16[i] = bf16_from_float(wpe[i] / 8);
    bf16 *d_wte = device_alloc_as(&mem, MEM_ACTIVATIONS, n_wte, DTYPE_BF16);
    bf16 *d_wpe = device_alloc_as(&mem, MEM_ACTIVATIONS, n_wpe, DTYPE_BF16);
    bf16 *d_dwte = device_alloc_as(&mem, MEM_ACTIVATIONS, n_wte, DTYPE_BF16);
    bf16 *d_dwpe = device_alloc_as(&mem, MEM_ACTIVATIONS, n_wpe, DTYPE_BF16);
    device_from_host_as(d_wte, wte16, n_wte, DTYPE_BF16), device_from_host_as(d_wpe, wpe16, n_wpe, DTYPE_BF16);
    device_from_host_as(d_dwte, dwte16, n_wte, DTYPE_BF16), device_from_host_as(d_dwpe, dwpe16, n_wpe, DTYPE_BF16);
    float *d_out = to_device(out, n_out);
    encoder_forward(out, inp, wte16, wpe16, DTYPE_BF16, B, T, C);
    encoder_forward_cuda(d_out, ints_to_device(inp, B * T), d_wte, d_wpe, DTYPE_BF16, B, T, C);
    device_to_host(got, d_out, n_out);
    ck_assert_msg(memcmp(got, out, n_out * 4) == 0, "the encoder on bf16 tables: not the CPU's bits");
    encoder_backward(dwte16, dwpe16, DTYPE_BF16, dout, inp, order, B, T, C);
    encoder_backward_cuda(d_dwte, d_dwpe, DTYPE_BF16, to_device(dout, n_out), ints_to_device(inp, B * T),
                          ints_to_device(order, B * T), B, T, C);
    device_to_host_widened(got, d_dwte, n_wte, DTYPE_BF16);
    for (size_t i = 0; i < n_wte; i++) wide[i] = bf16_to_float(dwte16[i]);
    ck_assert_msg(memcmp(got, wide, n_wte * 4) == 0, "bf16 dwte: not the CPU's bits");
    device_to_host_widened(got, d_dwpe, n_wpe, DTYPE_BF16);
    for (size_t i = 0; i < n_wpe; i++) wide[i] = bf16_to_float(dwpe16[i]);
    ck_assert_msg(memcmp(got, wide, n_wpe * 4) == 0, "bf16 dwpe: not the CPU's bits");
    free(wte16), free(wpe16), free(dwte16), free(dwpe16), free(wide), free(got), free(out);
}

START_TEST(test_encoder) {
    int inp[B * T];
    int order[B * T];
    for (int i = 0; i < B * T; i++) inp[i] = (i * 7) % 13;  // tokens repeat: rows add up
    gpt2_positions_by_token(order, inp, B * T, V);
    float *wte = random_host(Vp * C, 1, 1), *wpe = random_host(T * C, 2, 1), *dout = random_host(B * T * C, 3, 1);
    float *out = calloc(B * T * C, 4), *dwte = calloc(Vp * C, 4), *dwpe = calloc(T * C, 4);
    float *d_out = to_device(out, B * T * C), *d_dwte = to_device(dwte, Vp * C), *d_dwpe = to_device(dwpe, T * C);
    int *d_inp = ints_to_device(inp, B * T);
    encoder_forward(out, inp, wte, wpe, DTYPE_FP32, B, T, C);
    encoder_forward_cuda(d_out, d_inp, to_device(wte, Vp * C), to_device(wpe, T * C), DTYPE_FP32, B, T, C);
    assert_close("encoder out", d_out, out, B * T * C);
    encoder_backward(dwte, dwpe, DTYPE_FP32, dout, inp, NULL, B, T, C);
    encoder_backward_cuda(d_dwte, d_dwpe, DTYPE_FP32, to_device(dout, B * T * C), d_inp, ints_to_device(order, B * T),
                          B, T, C);
    assert_close("dwte", d_dwte, dwte, Vp * C);
    assert_close("dwpe", d_dwpe, dwpe, T * C);
    check_encoder_bf16(wte, wpe, dout, inp, order);
}
END_TEST

START_TEST(test_layernorm) {
    size_t n = B * T * C;
    float *inp = random_host(n, 4, 2), *w = random_host(C, 5, 1), *b = random_host(C, 6, 1), *dout = random_host(n, 7, 1);
    float *out = calloc(n, 4), *mean = calloc(B * T, 4), *rstd = calloc(B * T, 4);
    float *dinp = random_host(n, 8, 1), *dw = random_host(C, 9, 1), *db = random_host(C, 10, 1);
    float *d_out = to_device(out, n), *d_mean = to_device(mean, B * T), *d_rstd = to_device(rstd, B * T);
    float *d_inp = to_device(inp, n), *d_w = to_device(w, C), *d_b = to_device(b, C);
    float *d_dinp = to_device(dinp, n), *d_dw = to_device(dw, C), *d_db = to_device(db, C);
    layernorm_forward(out, mean, rstd, inp, w, b, B, T, C);
    layernorm_forward_cuda(d_out, d_mean, d_rstd, d_inp, d_w, d_b, B, T, C);
    assert_close("layernorm out", d_out, out, n);
    assert_close("layernorm rstd", d_rstd, rstd, B * T);
    layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, B, T, C);  // both add to nonzero gradients
    layernorm_backward_cuda(d_dinp, d_dw, d_db, to_device(dout, n), d_inp, d_w, d_mean, d_rstd, B, T, C);
    assert_close("layernorm dinp", d_dinp, dinp, n);
    assert_close("layernorm dweight", d_dw, dw, C);
    assert_close("layernorm dbias", d_db, db, C);
    // the fused residual + layernorm equals the two layers one after the other
    float *a2 = random_host(n, 11, 1), *res = calloc(n, 4);
    float *d_res = to_device(res, n);
    residual_forward(res, inp, a2, (int)n);
    layernorm_forward(out, mean, rstd, res, w, b, B, T, C);
    residual_layernorm_forward_cuda(d_res, d_out, d_mean, d_rstd, d_inp, to_device(a2, n), d_w, d_b, B, T, C);
    assert_close("fused residual", d_res, res, n);
    assert_close("fused layernorm", d_out, out, n);
}
END_TEST

START_TEST(test_matmul) {
    size_t nin = B * T * C, nout = B * T * OC;
    float *inp = random_host(nin, 12, 1), *w = random_host(OC * C, 13, 1), *bias = random_host(OC, 14, 1);
    float *dout = random_host(nout, 15, 1), *out = calloc(nout, 4);
    float *dinp = random_host(nin, 16, 1), *dw = random_host(OC * C, 17, 1), *db = random_host(OC, 18, 1);
    float *d_inp = to_device(inp, nin), *d_w = to_device(w, OC * C), *d_bias = to_device(bias, OC);
    float *d_out = to_device(out, nout), *d_dinp = to_device(dinp, nin), *d_dw = to_device(dw, OC * C);
    float *d_db = to_device(db, OC);
    matmul_forward(out, inp, w, bias, B, T, C, OC, NULL);
    matmul_forward_cuda(d_out, d_inp, d_w, d_bias, B, T, C, OC, NULL);
    assert_close("matmul out", d_out, out, nout);
    matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC, NULL);
    float *d_dout = to_device(dout, nout);
    matmul_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC, DINP_ADD, NULL);
    assert_close("matmul dinp", d_dinp, dinp, nin);
    assert_close("matmul dweight", d_dw, dw, OC * C);
    assert_close("matmul dbias", d_db, db, OC);
    // DINP_WRITE: dinp is the gradient alone, whatever the buffer held (NaN here)
    float *fresh = calloc(nin, 4), *dw2 = calloc(OC * C, 4), *db2 = calloc(OC, 4), *poison = malloc(nin * 4);
    for (size_t i = 0; i < nin; i++) poison[i] = NAN;
    matmul_backward(fresh, dw2, db2, dout, inp, w, B, T, C, OC, NULL);
    device_from_host(d_dinp, poison, nin);
    matmul_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC, DINP_WRITE, NULL);
    ck_assert_msg(relative_error(d_dinp, fresh, nin) <= 1e-3, "matmul dinp written");
    free(fresh), free(dw2), free(db2), free(poison);
    // bias + GELU fused into the product's epilogue
    float *gelu = calloc(nout, 4), *d_pre = to_device(out, nout), *d_gelu = to_device(gelu, nout);
    gelu_forward(gelu, out, (int)nout);
    matmul_bias_gelu_forward_cuda(d_pre, d_gelu, d_inp, d_w, d_bias, B, T, C, OC, NULL);
    assert_close("fused pre-activation", d_pre, out, nout);
    assert_close("fused gelu", d_gelu, gelu, nout);
}
END_TEST

// Rounds a host array to bf16 values, in place.
static void round_host(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(bf16_from_float(x[i]));
}

// A device copy of host values that are bf16 already (round_host), as bf16.
static bf16 *to_device_bf16(const float *host, size_t n) {
    float *d_fp32 = to_device(host, n);
    bf16 *d = device_alloc_as(&mem, MEM_ACTIVATIONS, n, DTYPE_BF16);
    device_round(d, d_fp32, n);  // exact: the values are bf16's
    return d;
}

// The product's cuBLASLt epilogue in bf16 (inp, w rounded already): bias and
// GELU after the product, pre keeping GELU's input. Outputs start as NaN.
static void check_bf16_gelu_epilogue(const float *inp, const float *w, const float *bias,
                                     const Bf16Products *products) {
    size_t nin = B * T * C, nout = B * T * OC;
    float *pre = calloc(nout, 4), *gelu = calloc(nout, 4), *poison = malloc(nout * 4);
    for (size_t i = 0; i < nout; i++) poison[i] = NAN;
    matmul_forward(pre, inp, w, bias, B, T, C, OC, NULL);
    gelu_forward(gelu, pre, (int)nout);
    float *d_pre = to_device(poison, nout), *d_gelu = to_device(poison, nout);
    matmul_bias_gelu_forward_cuda(d_pre, d_gelu, to_device(inp, nin), to_device_bf16(w, OC * C), to_device(bias, OC),
                                  B, T, C, OC, products);
    ck_assert_msg(relative_error(d_pre, pre, nout) <= 1e-3, "bf16 epilogue: pre-activation");
    ck_assert_msg(relative_error(d_gelu, gelu, nout) <= 1e-3, "bf16 epilogue: gelu");
    free(pre), free(gelu), free(poison);
}

// bf16 products: the CPU's fp32 products of the operands rounded to bf16 (exact
// in fp32, up to the order of the sums), and not the unrounded operands' product;
// the weight bf16 as kept, its gradient added into fp32 or into bf16 gradients.
START_TEST(test_matmul_bf16_operands) {
    size_t nin = B * T * C, nout = B * T * OC;
    float *inp = random_host(nin, 42, 1), *w = random_host(OC * C, 43, 1), *bias = random_host(OC, 44, 1);
    float *dout = random_host(nout, 45, 1), *out = calloc(nout, 4), *exact = calloc(nout, 4);
    float *dinp = calloc(nin, 4), *dw = calloc(OC * C, 4), *db = calloc(OC, 4);
    float *d_inp = to_device(inp, nin), *d_bias = to_device(bias, OC);
    float *d_out = to_device(out, nout), *d_dout = to_device(dout, nout), *d_dinp = to_device(dinp, nin);
    float *d_dw = to_device(dw, OC * C), *d_db = to_device(db, OC);
    Bf16Products products = {
        device_alloc_as(&mem, MEM_ACTIVATIONS, gpt2_product_operands((size_t)B * T, C, OC, 1), DTYPE_BF16),
        DTYPE_FP32};
    matmul_forward(exact, inp, w, bias, B, T, C, OC, NULL);
    round_host(inp, nin);
    round_host(w, OC * C);
    round_host(dout, nout);
    bf16 *d_w = to_device_bf16(w, OC * C);
    matmul_forward(out, inp, w, bias, B, T, C, OC, NULL);
    matmul_forward_cuda(d_out, d_inp, d_w, d_bias, B, T, C, OC, &products);
    assert_close("bf16 matmul out", d_out, out, nout);
    float *got = malloc(nout * sizeof(float)), worst = 0;
    device_to_host(got, d_out, nout);
    for (size_t i = 0; i < nout; i++) worst = fmaxf(worst, fabsf(got[i] - exact[i]));
    ck_assert_msg(worst > 1e-4f, "the bf16 product equals the fp32 one (%g): nothing was rounded", worst);
    matmul_backward(dinp, dw, db, dout, inp, w, B, T, C, OC, NULL);
    matmul_backward_cuda(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, B, T, C, OC, DINP_ADD, &products);
    assert_close("bf16 matmul dinp", d_dinp, dinp, nin);
    assert_close("bf16 matmul dweight", d_dw, dw, OC * C);
    // into bf16 gradients (zero here): the fp32 sum rounded once, within bf16's 2^-8
    bf16 *d_dw16 = to_device_bf16(calloc(OC * C, 4), OC * C);
    products.grad_dtype = DTYPE_BF16;
    matmul_backward_cuda(d_dinp, d_dw16, d_db, d_dout, d_inp, d_w, B, T, C, OC, DINP_WRITE, &products);
    float *d_dw16_wide = to_device(dw, OC * C);
    device_widen(d_dw16_wide, d_dw16, OC * C);
    assert_close("bf16 matmul dweight into bf16", d_dw16_wide, dw, OC * C);
    // the bias gradient adds up dout itself, in fp32 (twice now)
    float *dout32 = random_host(nout, 45, 1);
    for (int o = 0; o < OC; o++) db[o] = 0;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int o = 0; o < OC; o++) db[o] += 2 * dout32[r * OC + o];
    assert_close("bf16 matmul dbias", d_db, db, OC);
    check_bf16_gelu_epilogue(inp, w, bias, &products);
}
END_TEST

// --dropout's masks on a GPU rank: P = 0.3, rows 5.. of the global batch.
static const Dropout gpu_drop = {.key = 987654321, .row0 = 5, .threshold = (uint32_t)(0.3 * 16777216.0),
                                 .scale = 1.0f / 0.7f};

// The fused attention's tolerance per arithmetic. Rounding an operand to p
// mantissa bits costs up to u = 2^-(p+1) of it, so a product of two rounded
// operands up to 2u; the backward chains three products (dp = dout.v, ds, then
// dq, dk) and exp turns an absolute error of a score into a relative one of its
// probability: 8u bounds them. TF32 keeps 10 bits (u = 2^-11), bf16 7 (u = 2^-8).
// fp32 as three TF32 products drops small*small and rounds each small part to
// TF32: three terms of 2^-22 of the product, so 8u is 24 * 2^-22 (5.7e-6); 1e-5
// leaves the sums' order room, and fails if the three passes were one.
static double attention_tolerance(AttentionMath math) {
    return math == ATTENTION_BF16 ? 8 * 0x1p-8 : math == ATTENTION_TF32 ? 8 * 0x1p-11 : 1e-5;
}

// The bf16 attention that keeps its probabilities rounds, besides its operands,
// every intermediate it stores: the scores, the probabilities, the product y,
// and in the backward datt, dpre, dq, dk, dv: each at most u of itself. Eight
// roundings more than the fused path's 8u: 16u (6.25e-2).
static double materialized_bf16_tolerance(void) { return 16 * 0x1p-8; }

// The attention that keeps its probabilities, without and with dropout of them;
// with it, the probabilities the CPU and the GPU drop are the same ones (the
// values agree to rounding). In fp32 to 1e-3; in bf16 (ATTENTION_BF16) to
// materialized_bf16_tolerance, the probabilities read back widened.
static void check_materialized_attention(int b, int t, int c, int nh, const Dropout *drop, AttentionMath math) {
    size_t nqkv = (size_t)b * t * 3 * c, n = (size_t)b * t * c, natt = (size_t)b * nh * t * t;
    int bf16_data = math == ATTENTION_BF16;
    float *qkv = random_host(nqkv, 19, 1), *dout = random_host(n, 20, 1), *poison = malloc(n * 4);
    for (size_t i = 0; i < n; i++) poison[i] = NAN;
    float *out = calloc(n, 4), *att = calloc(natt, 4), *dqkv = random_host(nqkv, 21, 1);
    float *scratch = calloc(natt, 4), *dropped = calloc(natt, 4);
    float *d_qkv = to_device(qkv, nqkv), *d_out = to_device(poison, n), *d_att = to_device(att, natt);
    float *d_dqkv = to_device(dqkv, nqkv);
    float *d_scratch = device_alloc(&mem, MEM_ACTIVATIONS, 4 * n), *d_dscratch = device_alloc(&mem, MEM_ACTIVATIONS, 3 * n);
    float *d_datt = device_alloc(&mem, MEM_ACTIVATIONS, natt);
    attention_forward(out, att, qkv, scratch, drop, b, t, c, nh);
    attention_forward_cuda(d_out, d_att, d_qkv, d_scratch, d_datt, drop, b, t, c, nh, math);
    double tol = bf16_data ? materialized_bf16_tolerance() : 1e-3;
    float *got = malloc(natt * 4);
    if (bf16_data) device_to_host_widened(got, d_att, natt, DTYPE_BF16);
    else device_to_host(got, d_att, natt);
    double out_error = relative_error(d_out, out, n), att_error = 0, att_ref = 1e-30;
    for (size_t i = 0; i < natt; i++) {
        att_error = fmax(att_error, fabs((double)got[i] - att[i]));
        att_ref = fmax(att_ref, fabs((double)att[i]));
    }
    ck_assert_msg(out_error <= tol, "attention out: relative error %.3e", out_error);
    ck_assert_msg(att_error / att_ref <= tol, "attention probabilities: relative error %.3e", att_error / att_ref);
    if (drop) {
        if (bf16_data) device_to_host_widened(dropped, d_datt, natt, DTYPE_BF16);
        else device_to_host(dropped, d_datt, natt);
        for (size_t i = 0; i < natt; i++) ck_assert_msg((dropped[i] == 0) == (scratch[i] == 0), "mask %zu", i);
    }
    attention_backward(dqkv, dout, qkv, att, scratch, drop, b, t, c, nh);
    attention_backward_cuda(d_dqkv, to_device(dout, n), d_qkv, d_att, d_scratch, d_dscratch, d_datt, drop, b, t, c,
                            nh, math);
    double dqkv_error = relative_error(d_dqkv, dqkv, nqkv);
    printf("attention keeping probabilities B=%d T=%d C=%d NH=%d %s %s: out %.2e, probabilities %.2e, dqkv %.2e "
           "(tolerance %.2e)\n", b, t, c, nh, bf16_data ? "bf16" : "fp32", drop ? "dropout" : "", out_error,
           att_error / att_ref, dqkv_error, tol);
    ck_assert_msg(dqkv_error <= tol, "attention dqkv: relative error %.3e", dqkv_error);
    free(qkv), free(dout), free(poison), free(out), free(att), free(dqkv), free(scratch), free(dropped), free(got);
}

// The fused attention against the CPU's, forward and backward, with and without
// dropout: a mask that differed from the CPU's would be off by whole probabilities.
static void check_fused_attention(int b, int t, int c, int nh, const Dropout *drop, AttentionMath math) {
    size_t nqkv = (size_t)b * t * 3 * c, n = (size_t)b * t * c, natt = (size_t)b * nh * t * t;
    float *qkv = random_host(nqkv, 19, 1), *dout = random_host(n, 20, 1);
    float *dqkv = random_host(nqkv, 21, 0.1f);  // the backward adds to it: small, so the sums dominate
    float *dqkv_start = random_host(nqkv, 21, 0.1f);
    float *out = calloc(n, 4), *att = calloc(natt, 4), *scratch = calloc(natt, 4), *poison = malloc(n * 4);
    for (size_t i = 0; i < n; i++) poison[i] = NAN;
    float *d_qkv = to_device(qkv, nqkv), *d_out = to_device(poison, n), *d_dqkv = to_device(dqkv, nqkv);
    float *d_lse = device_alloc(&mem, MEM_ACTIVATIONS, (size_t)b * nh * t);
    float *d_delta = device_alloc(&mem, MEM_ACTIVATIONS, (size_t)b * nh * t);
    attention_forward(out, att, qkv, scratch, drop, b, t, c, nh);
    attention_fused_forward_cuda(d_out, d_lse, d_qkv, drop, b, t, c, nh, math);
    double tol = attention_tolerance(math), out_error = relative_error(d_out, out, n);
    attention_backward(dqkv, dout, qkv, att, scratch, drop, b, t, c, nh);
    float *d_dout = to_device(dout, n);
    attention_fused_backward_cuda(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, drop, b, t, c, nh, math);
    double dqkv_error = relative_error(d_dqkv, dqkv, nqkv);
    // again from the same inputs: no block adds into another's values, so bit for bit
    float *first = malloc(nqkv * 4), *again = malloc(nqkv * 4);
    device_to_host(first, d_dqkv, nqkv);
    device_from_host(d_dqkv, dqkv_start, nqkv);
    attention_fused_forward_cuda(d_out, d_lse, d_qkv, drop, b, t, c, nh, math);
    attention_fused_backward_cuda(d_dqkv, d_delta, d_dout, d_qkv, d_out, d_lse, drop, b, t, c, nh, math);
    device_to_host(again, d_dqkv, nqkv);
    ck_assert_msg(memcmp(first, again, nqkv * 4) == 0, "the fused attention's dqkv differs between two runs");
    free(first), free(again);
    printf("attention B=%d T=%d C=%d NH=%d %s %s: out %.2e, dqkv %.2e (tolerance %.2e)\n", b, t, c, nh,
           math == ATTENTION_BF16 ? "bf16" : math == ATTENTION_TF32 ? "tf32" : "fp32", drop ? "dropout" : "",
           out_error, dqkv_error, tol);
    ck_assert_msg(out_error <= tol, "attention out: relative error %.3e", out_error);
    ck_assert_msg(dqkv_error <= tol, "attention dqkv: relative error %.3e", dqkv_error);
    device_free(&mem, MEM_ACTIVATIONS, d_dout, n);
    device_free(&mem, MEM_ACTIVATIONS, d_delta, (size_t)b * nh * t);
    device_free(&mem, MEM_ACTIVATIONS, d_lse, (size_t)b * nh * t);
    device_free(&mem, MEM_ACTIVATIONS, d_dqkv, nqkv);
    device_free(&mem, MEM_ACTIVATIONS, d_out, n);
    device_free(&mem, MEM_ACTIVATIONS, d_qkv, nqkv);
    free(qkv), free(dout), free(dqkv), free(dqkv_start), free(out), free(att), free(scratch), free(poison);
}

// The layers' shape (T = 17: bf16 rows one value per lane), and rows of a
// multiple of 8 (bf16 rows 8 values per lane): T = 64, and 40 with head size 18.
START_TEST(test_attention) {
    const int shapes[][4] = {{B, T, C, NH}, {2, 64, 64, 2}, {1, 40, 36, 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bf16_data = 0; bf16_data <= 1; bf16_data++)
            for (int dropping = 0; dropping <= 1; dropping++)
                check_materialized_attention(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                             dropping ? &gpu_drop : NULL, bf16_data ? ATTENTION_BF16 : ATTENTION_FP32);
}
END_TEST

// The fused attention on the layers' shapes (head size 16), GPT-2's head size
// 64 over three query tiles, the last one partial, odd head sizes, and a single
// token, in each arithmetic.
START_TEST(test_fused_attention) {
    const int shapes[][4] = {{B, T, C, NH}, {2, 150, 128, 2}, {1, 65, 36, 2}, {3, 1, 18, 1}, {1, 64, 64, 1}};
    for (int math = ATTENTION_FP32; math <= ATTENTION_BF16; math++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int dropping = 0; dropping <= 1; dropping++)
                check_fused_attention(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
                                      dropping ? &gpu_drop : NULL, (AttentionMath)math);
}
END_TEST

// The residual branches' and the embeddings' masks: bit for bit the CPU's.
START_TEST(test_dropout_bitwise_the_cpu) {
    size_t n = B * T * C;
    float *x = random_host(n, 43, 1), *cpu = calloc(n, 4), *got = calloc(n, 4);
    float *d_x = to_device(x, n);
    dropout_apply(cpu, x, &gpu_drop, B, T, C);
    dropout_apply_cuda(d_x, d_x, &gpu_drop, B, T, C);
    device_to_host(got, d_x, n);
    ck_assert_int_eq(memcmp(got, cpu, n * sizeof(float)), 0);
}
END_TEST

START_TEST(test_gelu_and_residual) {
    size_t n = 1000;
    float *inp = random_host(n, 22, 4), *dout = random_host(n, 23, 1), *b = random_host(n, 24, 1);
    float *out = calloc(n, 4), *dinp = random_host(n, 25, 1);
    float *d_inp = to_device(inp, n), *d_out = to_device(out, n), *d_dinp = to_device(dinp, n);
    gelu_forward(out, inp, (int)n);
    gelu_forward_cuda(d_out, d_inp, (int)n);
    assert_close("gelu out", d_out, out, n);
    gelu_backward(dinp, inp, dout, (int)n);
    float *d_dout = to_device(dout, n), *fresh = calloc(n, 4), *poison = malloc(n * 4);
    gelu_backward_cuda(d_dinp, d_inp, d_dout, (int)n, DINP_ADD);
    assert_close("gelu dinp", d_dinp, dinp, n);
    for (size_t i = 0; i < n; i++) poison[i] = NAN;  // DINP_WRITE: the gradient alone, whatever was there
    gelu_backward(fresh, inp, dout, (int)n);
    device_from_host(d_dinp, poison, n);
    gelu_backward_cuda(d_dinp, d_inp, d_dout, (int)n, DINP_WRITE);
    ck_assert_msg(relative_error(d_dinp, fresh, n) <= 1e-3, "gelu dinp written");
    free(fresh), free(poison);
    residual_forward(out, inp, b, (int)n);
    residual_forward_cuda(d_out, d_inp, to_device(b, n), (int)n);
    assert_close("residual", d_out, out, n);
}
END_TEST

START_TEST(test_softmax_crossentropy) {
    size_t n = B * T * Vp;
    int targets[B * T];
    for (int i = 0; i < B * T; i++) targets[i] = (i * 13) % V;
    float *logits = random_host(n, 26, 5), *probs = calloc(n, 4), *losses = calloc(B * T, 4);
    float *d_logits = to_device(logits, n), *d_probs = to_device(probs, n), *d_losses = to_device(losses, B * T);
    int *d_targets = ints_to_device(targets, B * T);
    softmax_crossentropy_forward(losses, probs, logits, targets, B, T, V, Vp);
    softmax_crossentropy_forward_cuda(d_losses, d_probs, d_logits, d_targets, B, T, V, Vp);
    assert_close("probabilities", d_probs, probs, n);
    assert_close("losses", d_losses, losses, B * T);
    softmax_crossentropy_backward(logits, probs, targets, 0.01f, B, T, V, Vp);
    softmax_crossentropy_backward_cuda(d_logits, d_probs, d_targets, 0.01f, B, T, V, Vp);
    assert_close("dlogits", d_logits, logits, n);
}
END_TEST

// --fused-classifier: the CPU's fused pass within the tolerance, and the GPU's
// own two passes bit for bit (the same arithmetic, in one kernel).
START_TEST(test_fused_classifier) {
    size_t n = B * T * Vp;
    int targets[B * T];
    for (int i = 0; i < B * T; i++) targets[i] = (i * 13) % V;
    float *logits = random_host(n, 27, 5), *probs = calloc(n, 4), *losses = calloc(B * T, 4);
    float *d_fused = to_device(logits, n), *d_logits = to_device(logits, n), *d_probs = to_device(probs, n);
    float *d_losses = to_device(losses, B * T), *d_fused_losses = to_device(losses, B * T);
    int *d_targets = ints_to_device(targets, B * T);
    softmax_crossentropy_fused(losses, logits, targets, 0.01f, B, T, V, Vp);
    softmax_crossentropy_fused_cuda(d_fused_losses, d_fused, d_targets, 0.01f, B, T, V, Vp);
    assert_close("fused losses", d_fused_losses, losses, B * T);
    assert_close("fused dlogits", d_fused, logits, n);
    softmax_crossentropy_forward_cuda(d_losses, d_probs, d_logits, d_targets, B, T, V, Vp);
    softmax_crossentropy_backward_cuda(d_logits, d_probs, d_targets, 0.01f, B, T, V, Vp);
    float *fused = malloc(n * 4), *two = malloc(n * 4), *fused_losses = malloc(B * T * 4);
    device_to_host(fused, d_fused, n);
    device_to_host(two, d_logits, n);
    device_to_host(fused_losses, d_fused_losses, B * T);
    device_to_host(losses, d_losses, B * T);
    ck_assert_msg(memcmp(fused, two, n * 4) == 0 && memcmp(fused_losses, losses, B * T * 4) == 0,
                  "the fused kernel's dlogits and losses are the two kernels' bits");
    free(fused), free(two), free(fused_losses), free(logits), free(probs), free(losses);
}
END_TEST

START_TEST(test_adamw_and_add) {
    size_t n = 777;
    float *p = random_host(n, 27, 1), *g = random_host(n, 28, 1), *m = calloc(n, 4), *v = calloc(n, 4);
    AdamWSpan gpu = adamw_span(to_device(p, n), to_device(g, n), DTYPE_FP32, to_device(m, n), to_device(v, n), NULL, n);
    AdamWConfig cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int step = 1; step <= 3; step++) {
        adamw_update(p, g, m, v, n, step, cfg);
        device_adamw(&gpu, cfg);
    }
    ck_assert_int_eq(gpu.step, 3);
    assert_close("adamw params", gpu.params, p, n);
    assert_close("adamw v", gpu.v, v, n);
    for (size_t i = 0; i < n; i++) p[i] += g[i];
    device_add(gpu.params, gpu.grads, n);
    assert_close("add", gpu.params, p, n);
}
END_TEST

// bf16 on the GPU, bit for bit the CPU's (dtype.h): rounding on edge values
// (ties, subnormals, overflow, NaN), widening, rounded sums and scaling, the sum
// of squares, and AdamW on an fp32 master with bf16 gradients and a working copy.
START_TEST(test_bf16_bitwise_the_cpu) {
    const uint32_t edges[] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x00008000u, 0x00018000u, 0x007FFFFFu,
                              0x7F7F8000u, 0x7F7FFFFFu, 0x7F800001u, 0xFF800001u, 0x80000000u, 0x7F800000u};
    size_t n = 777, k = sizeof edges / sizeof edges[0];
    float *x = random_host(n, 31, 3), *y = random_host(n, 32, 1e-2f);
    memcpy(x, edges, sizeof edges);
    bf16 *want = malloc(n * sizeof(bf16)), *got = malloc(n * sizeof(bf16));
    bf16 *d_bf = device_alloc_as(&mem, MEM_ACTIVATIONS, n, DTYPE_BF16);
    bf16 *d_other = device_alloc_as(&mem, MEM_ACTIVATIONS, n, DTYPE_BF16);
    float *d_x = to_device(x, n), *d_y = to_device(y, n), *back = malloc(n * sizeof(float));
    device_round(d_bf, d_x, n);
    device_to_host_as(got, d_bf, n, DTYPE_BF16);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(got[i], bf16_from_float(x[i]));
    device_widen(d_y, d_bf, n);
    device_to_host(back, d_y, n);
    for (size_t i = k; i < n; i++) ck_assert_float_eq(back[i], bf16_to_float(got[i]));
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_float(bf16_to_float(got[i]) + y[i]);
    device_from_host(d_y, y, n);
    device_add_rounded(d_bf, d_y, n);
    device_to_host_as(got, d_bf, n, DTYPE_BF16);
    for (size_t i = k; i < n; i++) ck_assert_uint_eq(got[i], want[i]);
    device_round(d_other, d_y, n);
    bf16 *other = malloc(n * sizeof(bf16));
    device_to_host_as(other, d_other, n, DTYPE_BF16);
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_float(bf16_to_float(got[i]) + bf16_to_float(other[i]));
    device_add_as(d_bf, d_other, n, DTYPE_BF16);
    device_to_host_as(got, d_bf, n, DTYPE_BF16);
    for (size_t i = k; i < n; i++) ck_assert_uint_eq(got[i], want[i]);
    for (size_t i = 0; i < n; i++) want[i] = bf16_from_float(bf16_to_float(got[i]) * 0.37f);
    device_scale_as(d_bf, n, DTYPE_BF16, 0.37f);
    device_to_host_as(got, d_bf, n, DTYPE_BF16);
    for (size_t i = k; i < n; i++) ck_assert_uint_eq(got[i], want[i]);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += (double)bf16_to_float(other[i]) * bf16_to_float(other[i]);
    ck_assert_double_eq_tol(device_sum_squares_as(d_other, n, DTYPE_BF16), sum, 1e-12 * sum);
    // AdamW: a master with bf16 gradients, and its working copy
    float *master = random_host(n, 33, 1), *m = calloc(n, 4), *v = calloc(n, 4);
    bf16 *working = malloc(n * sizeof(bf16));
    AdamWSpan cpu = adamw_span(master, other, DTYPE_BF16, m, v, working, n);
    AdamWSpan gpu = adamw_span(to_device(master, n), d_other, DTYPE_BF16, to_device(m, n), to_device(v, n), d_bf, n);
    AdamWConfig cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int step = 1; step <= 3; step++) {
        adamw_step_span(&cpu, cfg);
        device_adamw(&gpu, cfg);
    }
    assert_close("bf16 adamw master", gpu.params, master, n);
    device_to_host_as(got, d_bf, n, DTYPE_BF16);
    device_to_host(back, gpu.params, n);
    for (size_t i = 0; i < n; i++) ck_assert_uint_eq(got[i], bf16_from_float(back[i]));
}
END_TEST

// --ema's average is bit for bit the CPU's (no fused multiply-add), and the
// exchange of weights and average moves every element both ways.
START_TEST(test_ema_bitwise_the_cpu) {
    size_t n = 1001;
    float *ema = random_host(n, 41, 1), *w = random_host(n, 42, 1), *got = malloc(n * sizeof(float));
    float *d_ema = to_device(ema, n), *d_w = to_device(w, n);
    for (int step = 0; step < 3; step++) {
        ema_update(ema, w, n, 0.97f);
        device_ema_update(d_ema, d_w, n, 0.97f);
    }
    device_to_host(got, d_ema, n);
    ck_assert_int_eq(memcmp(got, ema, n * sizeof(float)), 0);
    device_swap(d_ema, d_w, n);
    device_to_host(got, d_w, n);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(got[i], ema[i]);
    device_to_host(got, d_ema, n);
    for (size_t i = 0; i < n; i++) ck_assert_float_eq(got[i], w[i]);
}
END_TEST

// ZeRO++'s quantizer (device/quantize.h): the GPU's wire, and what it turns back
// into, are the CPU's bit for bit, int8 and int4, fp32 and bf16, odd sizes and a
// block with a NaN.
START_TEST(test_quantize_bitwise_the_cpu) {
    size_t n = 1001;
    float *x = random_host(n, 51, 3);
    x[600] = NAN;
    bf16 *xb = malloc(n * sizeof(bf16));
    for (size_t i = 0; i < n; i++) xb[i] = bf16_from_float(x[i]);
    float *d_x = to_device(x, n);
    bf16 *d_xb = device_alloc_as(&mem, MEM_ACTIVATIONS, n, DTYPE_BF16);
    device_from_host_as(d_xb, xb, n, DTYPE_BF16);
    const QuantFormat formats[] = {{8, 256}, {4, 256}, {8, 7}, {4, 33}};
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++)
        for (int b = 0; b < 2; b++) {
            QuantFormat f = formats[k];
            DType dtype = b ? DTYPE_BF16 : DTYPE_FP32;
            size_t bytes = quant_wire_bytes(n, f);
            unsigned char *want = malloc(bytes), *got = malloc(bytes);
            quantize_host(want, b ? (void *)xb : (void *)x, n, dtype, f);
            void *d_wire = device_alloc_as(&mem, MEM_ACTIVATIONS, bytes, DTYPE_INT8);
            device_quantize(d_wire, b ? (void *)d_xb : (void *)d_x, n, dtype, f);
            device_to_host_as(got, d_wire, bytes, DTYPE_INT8);
            ck_assert_msg(memcmp(got, want, bytes) == 0, "int%d blocks of %zu, %s: the GPU's wire is the CPU's", f.bits,
                          f.block, dtype_name(dtype));
            size_t size = dtype_size(dtype);
            void *back = malloc(n * size), *host = malloc(n * size), *d_back = device_alloc_as(&mem, MEM_ACTIVATIONS, n, dtype);
            dequantize_host(host, want, n, dtype, f);
            device_dequantize(d_back, d_wire, n, dtype, f);
            device_to_host_as(back, d_back, n, dtype);
            ck_assert_msg(memcmp(back, host, n * size) == 0, "int%d blocks of %zu, %s: dequantized alike", f.bits, f.block,
                          dtype_name(dtype));
            device_free_as(&mem, MEM_ACTIVATIONS, d_wire, bytes, DTYPE_INT8);
            device_free_as(&mem, MEM_ACTIVATIONS, d_back, n, dtype);
            free(want), free(got), free(back), free(host);
        }
}
END_TEST

int main(void) {
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1);  // plain fp32 products for the comparison
    device_init(0);
    Suite *s = suite_create("gpu");
    TCase *tc = tcase_create("layers vs cpu");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_encoder);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_gelu_and_residual);
    tcase_add_test(tc, test_softmax_crossentropy);
    tcase_add_test(tc, test_fused_classifier);
    tcase_add_test(tc, test_adamw_and_add);
    tcase_add_test(tc, test_bf16_bitwise_the_cpu);
    tcase_add_test(tc, test_ema_bitwise_the_cpu);
    tcase_add_test(tc, test_dropout_bitwise_the_cpu);
    tcase_add_test(tc, test_matmul_bf16_operands);
    tcase_add_test(tc, test_quantize_bitwise_the_cpu);
    suite_add_tcase(s, tc);
    TCase *fused = tcase_create("fused attention");
    tcase_set_timeout(fused, 120);
    tcase_add_test(fused, test_fused_attention);
    suite_add_tcase(s, fused);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);  // the CUDA context does not survive fork
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
