// gpt2_ops.c: GPT-2's layers on the CPU. Loops are written out for the cheap
// element-wise layers; every matrix product goes through `product` (or
// product_bf16), on the engine models/products.c chooses for this CPU: oneDNN
// or OpenBLAS; the layer tests' double build, OpenBLAS's dgemm.
//
// Threads (OpenMP, the same pool as the engine's: run/threads.c) split the
// loops over rows or elements, whose results do not depend on which thread
// computes them. Sums over rows (the bias and layernorm parameter gradients) are
// split by columns instead: each column still adds its rows in order, so every
// result is the same bit for bit whatever the number of threads.
#include "models/gpt2_ops.h"

#include "models/gpt2.h"  // GPT2_OPERAND_ALIGN
#include "util/errors.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>  // exp, tanh, sqrt, log pick the float or double version from real_t

#ifdef SHARDLAB_REAL_DOUBLE
#include <cblas.h>

// The layer tests' double build multiplies in double, on OpenBLAS's dgemm; the
// library's products run on the engine models/products.c chooses.
void product(char transa, char transb, int M, int N, int K, real_t alpha, const real_t *A, int lda, const real_t *B,
             int ldb, real_t beta, real_t *C, int ldc) {
    cblas_dgemm(CblasRowMajor, transa == 'T' ? CblasTrans : CblasNoTrans, transb == 'T' ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#endif

static const real_t LAYERNORM_EPS = 1e-5;

// This thread's share [*begin, *end) of n columns, inside a parallel region.
static void thread_columns(int n, int *begin, int *end) {
    int threads = omp_get_num_threads(), me = omp_get_thread_num();
    *begin = (int)((long)n * me / threads);
    *end = (int)((long)n * (me + 1) / threads);
}

// sums[c] += rows[r][c] over r = 0..R-1 in order, columns shared among threads.
static void add_column_sums(real_t *sums, const real_t *rows, int R, int cols) {
#pragma omp parallel
    {
        int begin, end;
        thread_columns(cols, &begin, &end);
        for (int r = 0; r < R; r++) {
            const real_t *row = rows + (size_t)r * cols;
            for (int c = begin; c < end; c++) sums[c] += row[c];  // vectorised
        }
    }
}

void encoder_forward(real_t *out, const int *inp, const void *wte, const void *wpe, DType dtype, int B, int T,
                     int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            real_t *out_bt = out + ((size_t)b * T + t) * C;
            size_t token_at = (size_t)inp[b * T + t] * C, t_at = (size_t)t * C;
#ifndef SHARDLAB_REAL_DOUBLE
            if (dtype == DTYPE_BF16) {
                const bf16 *wte_row = (const bf16 *)wte + token_at, *wpe_row = (const bf16 *)wpe + t_at;
                for (int i = 0; i < C; i++) out_bt[i] = bf16_to_float(wte_row[i]) + bf16_to_float(wpe_row[i]);
                continue;
            }
#endif
            const real_t *wte_row = (const real_t *)wte + token_at, *wpe_row = (const real_t *)wpe + t_at;
            for (int i = 0; i < C; i++) out_bt[i] = wte_row[i] + wpe_row[i];  // vectorised
        }
    }
    (void)dtype;
}

#ifndef SHARDLAB_REAL_DOUBLE
#define SUM_CHUNK 256  // channels summed at a time, on the stack

// row[i] = round(row[i] + the fp32 sum, from 0, of the `count` rows of dout at positions[0..count) (or, positions
// NULL, at first, first + stride, ...)), for the channels [c0, c0 + n).
static void add_rounded_row_sum(bf16 *row, const float *dout, const int *positions, int first, int stride,
                                int count, int c0, int n, int C) {
    float sum[SUM_CHUNK] = {0};
    for (int j = 0; j < count; j++) {
        const float *d = dout + (size_t)(positions ? positions[j] : first + j * stride) * C + c0;
        for (int i = 0; i < n; i++) sum[i] += d[i];  // vectorised
    }
    for (int i = 0; i < n; i++) row[c0 + i] = bf16_from_float(bf16_to_float(row[c0 + i]) + sum[i]);
}

// bf16 gradients: dwpe's row t sums the B positions (b, t); dwte's row of a token sums its run of
// positions_by_token. Rows apart, so the threads' split changes no bits.
static void encoder_backward_bf16(bf16 *dwte, bf16 *dwpe, const float *dout, const int *inp,
                                  const int *positions_by_token, int B, int T, int C) {
    int BT = B * T;
#pragma omp parallel for
    for (int t = 0; t < T; t++)
        for (int c0 = 0; c0 < C; c0 += SUM_CHUNK)
            add_rounded_row_sum(dwpe + (size_t)t * C, dout, NULL, t, T, B, c0, C - c0 < SUM_CHUNK ? C - c0 : SUM_CHUNK,
                                C);
#pragma omp parallel for schedule(dynamic, 16)
    for (int first = 0; first < BT; first++) {
        int token = inp[positions_by_token[first]];
        if (first > 0 && inp[positions_by_token[first - 1]] == token) continue;  // not the start of a run
        int count = 1;
        while (first + count < BT && inp[positions_by_token[first + count]] == token) count++;
        for (int c0 = 0; c0 < C; c0 += SUM_CHUNK)
            add_rounded_row_sum(dwte + (size_t)token * C, dout, positions_by_token + first, 0, 0, count, c0,
                                C - c0 < SUM_CHUNK ? C - c0 : SUM_CHUNK, C);
    }
}
#endif

void encoder_backward(void *dwte, void *dwpe, DType grad_dtype, const real_t *dout, const int *inp,
                      const int *positions_by_token, int B, int T, int C) {
#ifndef SHARDLAB_REAL_DOUBLE
    if (grad_dtype == DTYPE_BF16) {
        CHECK(positions_by_token, "bf16 embedding gradients need the batch's positions sorted by token");
        encoder_backward_bf16(dwte, dwpe, dout, inp, positions_by_token, B, T, C);
        return;
    }
#endif
    (void)grad_dtype, (void)positions_by_token;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const real_t *dout_bt = dout + ((size_t)b * T + t) * C;
            real_t *dwte_row = (real_t *)dwte + (size_t)inp[b * T + t] * C;
            real_t *dwpe_row = (real_t *)dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) {  // vectorised
                dwte_row[i] += dout_bt[i];
                dwpe_row[i] += dout_bt[i];
            }
        }
    }
}

void layernorm_forward(real_t *out, real_t *mean, real_t *rstd, const real_t *inp,
                       const real_t *weight, const real_t *bias, int B, int T, int C) {
#pragma omp parallel for
    for (int row = 0; row < B * T; row++) {
        const real_t *x = inp + (size_t)row * C;
        real_t m = 0;
        for (int i = 0; i < C; i++) m += x[i];  // vectorised
        m /= C;
        real_t var = 0;
        for (int i = 0; i < C; i++) var += (x[i] - m) * (x[i] - m);  // vectorised
        var /= C;
        real_t s = 1 / sqrt(var + LAYERNORM_EPS);
        real_t *y = out + (size_t)row * C;
        for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * weight[i] + bias[i];  // vectorised
        mean[row] = m;
        rstd[row] = s;
    }
}

void layernorm_backward(real_t *dinp, real_t *dweight, real_t *dbias, const real_t *dout,
                        const real_t *inp, const real_t *weight, const real_t *mean,
                        const real_t *rstd, int B, int T, int C) {
    int rows = B * T;
#pragma omp parallel for
    for (int row = 0; row < rows; row++) {
        const real_t *dy = dout + (size_t)row * C;
        const real_t *x = inp + (size_t)row * C;
        real_t *dx = dinp + (size_t)row * C;
        real_t m = mean[row], s = rstd[row];
        // two reductions over the row: mean of dnorm and mean of dnorm * norm
        real_t dnorm_mean = 0, dnorm_norm_mean = 0;
        for (int i = 0; i < C; i++) {  // vectorised
            real_t norm = (x[i] - m) * s;
            real_t dnorm = weight[i] * dy[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int i = 0; i < C; i++) {  // vectorised
            real_t norm = (x[i] - m) * s;
            real_t dnorm = weight[i] * dy[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // the parameter gradients sum over rows: by columns, rows in order
    add_column_sums(dbias, dout, rows, C);
#pragma omp parallel
    {
        int begin, end;
        thread_columns(C, &begin, &end);
        for (int row = 0; row < rows; row++) {
            const real_t *dy = dout + (size_t)row * C;
            const real_t *x = inp + (size_t)row * C;
            real_t m = mean[row], s = rstd[row];
            for (int i = begin; i < end; i++) dweight[i] += (x[i] - m) * s * dy[i];  // vectorised
        }
    }
}

#ifndef SHARDLAB_REAL_DOUBLE
// Rounds `count` values into bf16 at operands[*at] and moves *at past them, to the
// next GPT2_OPERAND_ALIGN elements (the parts gpt2_product_operands counts).
static const bf16 *rounded(bf16 *operands, size_t *at, const float *values, size_t count) {
    bf16 *part = operands + *at;
#pragma omp parallel for
    for (size_t i = 0; i < count; i++) part[i] = bf16_from_float(values[i]);
    *at += (count + GPT2_OPERAND_ALIGN - 1) / GPT2_OPERAND_ALIGN * GPT2_OPERAND_ALIGN;
    return part;
}
#endif

void matmul_forward(real_t *out, const real_t *inp, const void *weight, const real_t *bias, int B, int T, int C,
                    int OC, const Bf16Products *products) {
    int rows = B * T;
    // out (rows,OC) = inp (rows,C) @ weight^T (C,OC)
#ifdef SHARDLAB_REAL_DOUBLE
    (void)products;  // the layer tests' double build multiplies in double only
#else
    if (products) {
        size_t at = 0;
        const bf16 *x = rounded(products->operands, &at, inp, (size_t)rows * C);
        product_bf16('N', 'T', rows, OC, C, x, C, weight, C, 0, out, DTYPE_FP32, OC);
    } else
#endif
        product('N', 'T', rows, OC, C, 1, inp, C, weight, C, 0, out, OC);
    if (!bias) return;
#pragma omp parallel for
    for (int r = 0; r < rows; r++) {
        real_t *out_r = out + (size_t)r * OC;
        for (int o = 0; o < OC; o++) out_r[o] += bias[o];  // vectorised
    }
}

void matmul_backward(real_t *dinp, void *dweight, real_t *dbias, const real_t *dout, const real_t *inp,
                     const void *weight, int B, int T, int C, int OC, const Bf16Products *products) {
    int rows = B * T;
#ifdef SHARDLAB_REAL_DOUBLE
    (void)products;
#else
    if (products) {
        size_t at = 0;
        const bf16 *x = rounded(products->operands, &at, inp, (size_t)rows * C);
        const bf16 *dy = rounded(products->operands, &at, dout, (size_t)rows * OC);
        // beta 1, as the fp32 path's: matmul_backward adds into dinp. Today every dinp passed here starts zeroed
        // with this product its only contribution, so beta 0 gives the same bits, but adding is the contract
        product_bf16('N', 'N', rows, C, OC, dy, OC, weight, C, 1, dinp, DTYPE_FP32, C);
        product_bf16('T', 'N', OC, C, rows, dy, OC, x, C, 1, dweight, products->grad_dtype, C);
    } else
#endif
    {
        // dinp (rows,C) += dout (rows,OC) @ weight (OC,C)
        product('N', 'N', rows, C, OC, 1, dout, OC, weight, C, 1, dinp, C);
        // dweight (OC,C) += dout^T (OC,rows) @ inp (rows,C)
        product('T', 'N', OC, C, rows, 1, dout, OC, inp, C, 1, dweight, C);
    }
    if (dbias) add_column_sums(dbias, dout, rows, OC);  // from dout in fp32, as the GPU's
}

// Softmax of row t over columns 0..t, zero above the diagonal (the causal mask).
static void causal_softmax_rows(real_t *att, int T) {
    for (int t = 0; t < T; t++) {
        real_t *row = att + (size_t)t * T;
        real_t maxval = row[0];
        for (int t2 = 1; t2 <= t; t2++)
            if (row[t2] > maxval) maxval = row[t2];
        real_t sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
            row[t2] = exp(row[t2] - maxval);
            sum += row[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) row[t2] /= sum;  // vectorised
        for (int t2 = t + 1; t2 < T; t2++) row[t2] = 0;
    }
}

// For head h of row b, q, k and v are (T, hs) matrices inside qkv with row
// stride 3C. The (b, h) pairs are independent (each writes its own columns of
// out and its own att) and run in parallel, one pair per thread at a time;
// OpenBLAS runs a product called inside a parallel region on that one thread.
// out = in (T,T), row b's head h of the probabilities or of their gradient, with
// drop's mask (element h*T + t2 of position t); out may be in.
static void drop_probabilities(real_t *out, const real_t *in, const Dropout *drop, int b, int h, int T) {
    for (int t = 0; t < T; t++) {
        uint64_t key = dropout_row_key(drop, b, t);
        for (int t2 = 0; t2 < T; t2++) {
            size_t i = (size_t)t * T + t2;
            out[i] = dropout_keep(drop, key, (uint64_t)h * T + t2) ? in[i] * (real_t)drop->scale : 0;
        }
    }
}

void attention_forward(real_t *out, real_t *att, const real_t *qkv, real_t *scratch, const Dropout *drop, int B,
                       int T, int C, int NH) {
    int hs = C / NH;
    real_t scale = 1 / sqrt((real_t)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const real_t *q = qkv + (size_t)b * T * 3 * C + h * hs;
            const real_t *k = q + C;
            const real_t *v = q + 2 * C;
            real_t *att_bh = att + ((size_t)b * NH + h) * T * T;
            real_t *out_bh = out + (size_t)b * T * C + h * hs;
            // att (T,T) = softmax(scale * q @ k^T), causal
            product('N', 'T', T, T, hs, scale, q, 3 * C, k, 3 * C,
                       0, att_bh, T);
            causal_softmax_rows(att_bh, T);
            const real_t *used = att_bh;  // what multiplies v: the probabilities, or them dropped
            if (drop) {
                real_t *dropped = scratch + ((size_t)b * NH + h) * T * T;
                drop_probabilities(dropped, att_bh, drop, b, h, T);
                used = dropped;
            }
            // out (T,hs) = att (T,T) @ v (T,hs)
            product('N', 'N', T, hs, T, 1, used, T, v, 3 * C,
                       0, out_bh, C);
        }
    }
}

void dropout_apply(real_t *out, const real_t *in, const Dropout *drop, int B, int T, int C) {
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            uint64_t key = dropout_row_key(drop, b, t);
            size_t at = ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++)
                out[at + c] = dropout_keep(drop, key, (uint64_t)c) ? in[at + c] * (real_t)drop->scale : 0;
        }
}

// Parallel over (b, h) like the forward: each pair adds into its own columns of
// dqkv and works in its own (T,T) slice of scratch, so no two threads touch the
// same number and each sum runs in the same order whatever the thread count.
void attention_backward(real_t *dqkv, const real_t *dout, const real_t *qkv, const real_t *att,
                        real_t *scratch, const Dropout *drop, int B, int T, int C, int NH) {
    int hs = C / NH;
    real_t scale = 1 / sqrt((real_t)hs);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t qkv_offset = (size_t)b * T * 3 * C + h * hs;
            const real_t *q = qkv + qkv_offset, *k = q + C, *v = q + 2 * C;
            real_t *dq = dqkv + qkv_offset, *dk = dq + C, *dv = dq + 2 * C;
            const real_t *att_bh = att + ((size_t)b * NH + h) * T * T;
            const real_t *dout_bh = dout + (size_t)b * T * C + h * hs;
            real_t *datt = scratch + ((size_t)b * NH + h) * T * T;  // (T,T)
            // dv (T,hs) += att^T @ dout, of the probabilities that multiplied v (dropped, in datt for now)
            if (drop) drop_probabilities(datt, att_bh, drop, b, h, T);
            product('T', 'N', T, hs, T, 1, drop ? datt : att_bh, T, dout_bh, C,
                       1, dv, 3 * C);
            // datt (T,T) = dout (T,hs) @ v^T, through the same mask back to the probabilities
            product('N', 'T', T, T, hs, 1, dout_bh, C, v, 3 * C,
                       0, datt, T);
            if (drop) drop_probabilities(datt, datt, drop, b, h, T);
            // softmax backward, row by row and in place: dpre = att * (datt - sum(att * datt))
            for (int t = 0; t < T; t++) {
                const real_t *a = att_bh + (size_t)t * T;
                real_t *d = datt + (size_t)t * T;
                real_t dot = 0;
                for (int t2 = 0; t2 <= t; t2++) dot += a[t2] * d[t2];  // vectorised
                for (int t2 = 0; t2 <= t; t2++) d[t2] = a[t2] * (d[t2] - dot);  // vectorised
                for (int t2 = t + 1; t2 < T; t2++) d[t2] = 0;
            }
            const real_t *dpreatt = datt;
            // dq += scale * dpre @ k ;  dk += scale * dpre^T @ q
            product('N', 'N', T, hs, T, scale, dpreatt, T, k,
                       3 * C, 1, dq, 3 * C);
            product('T', 'N', T, hs, T, scale, dpreatt, T, q,
                       3 * C, 1, dk, 3 * C);
        }
    }
}

#define GELU_SCALE 0.7978845608028654  // sqrt(2 / pi)

// exp for the element-wise loops. libm's expf and tanhf are calls the compiler
// cannot vectorise, and they were most of GELU's and the softmax's time; this one
// is straight-line arithmetic. x = n ln 2 + r with |r| <= ln2 / 2 (ln 2 in two
// parts, so r is exact), e^r by its Taylor series to r^7 (a relative error under
// 6e-9, below float's 6e-8), times 2^n made in the exponent bits. Below -87 (e^x
// under float's smallest normal) it gives 0; above 88, e^88; NaN stays NaN.
//
// The float build computes it on LANES elements at once with GCC's vector
// extensions (vector_size: an AVX-512 register's 16, else AVX2's 8 on x86, NEON's
// pairs on arm64), because the compiler vectorises a loop of selects only where the
// instruction set has masks (AVX-512), and every exp of AVX2 would be scalar. A
// loop's last, partial group goes through the same lanes, padded: every element
// takes the same instructions wherever it falls, so a result depends neither on
// the threads nor on N. A group whose lanes all lie in [-87, 88] (nearly all of
// them: a softmax's and GELU's arguments) skips the clamps and selects, which
// change nothing there: the same bits, an eighth less time (tests/test_model.c
// holds each lane to the same bits beside an out-of-range one). The double build (finite differences in
// tests/test_layers.c) keeps libm's exp, one element at a time.
#ifdef SHARDLAB_REAL_DOUBLE
static inline real_t exp_elementwise(real_t x) { return exp(x); }
real_t exp_element(real_t x) { return exp_elementwise(x); }
#else
#ifdef __AVX512F__
#define LANES 16  // a 512-bit register
#else
#define LANES 8   // a 256-bit one (two NEON registers on arm64)
#endif
typedef float lanes_f __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t lanes_i __attribute__((vector_size(LANES * sizeof(int32_t))));

static inline lanes_f splat(float x) {
    lanes_f v;
    for (int k = 0; k < LANES; k++) v[k] = x;
    return v;
}
// where mask (all ones per lane), a; else b
static inline lanes_f select_lanes(lanes_i mask, lanes_f a, lanes_f b) {
    return (lanes_f)(((lanes_i)a & mask) | ((lanes_i)b & ~mask));
}

// e^x for every lane in [-87, 88] (no NaN): the arithmetic alone.
static inline lanes_f exp_lanes_in_range(lanes_f x) {
    const float round_bias = 12582912.0f;  // 1.5 * 2^23: adding it rounds to a whole number
    lanes_f n = (x * 1.44269504f + round_bias) - round_bias;  // round(x / ln 2)
    lanes_f r = (x - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 = 0.693145752 + 1.42860677e-6
    lanes_f p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 +
                r * (1.0f / 5040)))))));
    lanes_i bits = (__builtin_convertvector(n, lanes_i) + 127) << 23;  // 2^n
    return p * (lanes_f)bits;
}

static inline lanes_f exp_lanes(lanes_f x) {
    lanes_i in_range = (x >= splat(-87.0f)) & (x <= splat(88.0f));  // false for a NaN
    int all = 1;
    for (int k = 0; k < LANES; k++) all &= in_range[k] != 0;
    if (all) return exp_lanes_in_range(x);
    lanes_i nan = ~(x == x), below = x < splat(-87.0f);
    // clamped into [-87, 88]; a NaN takes 0's path through the integer conversion below (undefined for a NaN)
    lanes_f clamped = select_lanes(below, splat(-87.0f), x);
    clamped = select_lanes(clamped > splat(88.0f), splat(88.0f), clamped);
    clamped = select_lanes(nan, splat(0.0f), clamped);
    lanes_f result = select_lanes(below, splat(0.0f), exp_lanes_in_range(clamped));
    return select_lanes(nan, x, result);
}

// The loads and stores of a group of LANES elements from i, count of them real
// (the rest of a partial group padded with `pad`, and not stored).
static inline lanes_f load_lanes(const float *x, int count, float pad) {
    if (count == LANES) {  // a whole group: one (unaligned) vector load
        lanes_f whole;
        memcpy(&whole, x, sizeof whole);
        return whole;
    }
    lanes_f v = splat(pad);
    memcpy(&v, x, (size_t)count * sizeof(float));
    return v;
}

static inline void store_lanes(float *x, lanes_f v, int count) {
    if (count == LANES) memcpy(x, &v, sizeof v);
    else memcpy(x, &v, (size_t)count * sizeof(float));
}

real_t exp_element(real_t x) { return exp_lanes(splat(x))[0]; }
#endif

// GELU's tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
// written as x s with s = 1 / (1 + e^(-2u)) = (1 + tanh u) / 2: one exp, no
// tanh, and no cancellation where tanh u is near -1.
#ifdef SHARDLAB_REAL_DOUBLE
void gelu_forward(real_t *out, const real_t *inp, int N) {
#pragma omp parallel for simd
    for (int i = 0; i < N; i++) {
        real_t x = inp[i];
        real_t u = (real_t)GELU_SCALE * (x + (real_t)0.044715 * x * x * x);
        out[i] = x / (1 + exp_elementwise(-2 * u));
    }
}
#else
void gelu_forward(real_t *out, const real_t *inp, int N) {
    int groups = (N + LANES - 1) / LANES;
#pragma omp parallel for
    for (int g = 0; g < groups; g++) {
        int count = N - g * LANES < LANES ? N - g * LANES : LANES;
        lanes_f x = load_lanes(inp + (size_t)g * LANES, count, 0.0f);
        lanes_f u = (float)GELU_SCALE * (x + 0.044715f * x * x * x);
        store_lanes(out + (size_t)g * LANES, x / (1 + exp_lanes(-2 * u)), count);
    }
}
#endif

// d/dx [x s] = s + x s'(u) du/dx with s' = 2 s (1 - s) and 1 - s = e^(-2u) s:
// again one exp, and no 1 - s that cancels where s is near 1.
#ifdef SHARDLAB_REAL_DOUBLE
void gelu_backward(real_t *dinp, const real_t *inp, const real_t *dout, int N) {
#pragma omp parallel for simd
    for (int i = 0; i < N; i++) {
        real_t x = inp[i];
        real_t u = (real_t)GELU_SCALE * (x + (real_t)0.044715 * x * x * x);
        real_t e = exp_elementwise(-2 * u), s = 1 / (1 + e);
        real_t one_minus_s = e * s;  // at most 1: e alone overflows a product where x is very negative
        real_t du = (real_t)GELU_SCALE * (1 + (real_t)3 * (real_t)0.044715 * x * x);
        dinp[i] += (s + 2 * x * one_minus_s * s * du) * dout[i];
    }
}
#else
void gelu_backward(real_t *dinp, const real_t *inp, const real_t *dout, int N) {
    int groups = (N + LANES - 1) / LANES;
#pragma omp parallel for
    for (int g = 0; g < groups; g++) {
        size_t at = (size_t)g * LANES;
        int count = N - g * LANES < LANES ? N - g * LANES : LANES;
        lanes_f x = load_lanes(inp + at, count, 0.0f);
        lanes_f u = (float)GELU_SCALE * (x + 0.044715f * x * x * x);
        lanes_f e = exp_lanes(-2 * u), s = 1 / (1 + e);
        lanes_f one_minus_s = e * s;  // at most 1: e alone overflows a product where x is very negative
        lanes_f du = (float)GELU_SCALE * (1 + 3 * 0.044715f * x * x);
        lanes_f grad = (s + 2 * x * one_minus_s * s * du) * load_lanes(dout + at, count, 0.0f);
        store_lanes(dinp + at, load_lanes(dinp + at, count, 0.0f) + grad, count);
    }
}
#endif

void residual_forward(real_t *out, const real_t *a, const real_t *b, int N) {
#pragma omp parallel for
    for (int i = 0; i < N; i++) out[i] = a[i] + b[i];  // vectorised
}

// One row's softmax over its first V of Vp logits into p (zeros past V), each
// probability times `scale` (1 leaves it as it is: x * 1 is exactly x), p maybe
// the logits themselves; returns -log p(target). One copy of the code for both
// callers: the same vector lanes, the same sums.
__attribute__((noinline)) static real_t softmax_row(real_t *p, const real_t *logit, int target, int V, int Vp,
                                                    real_t scale) {
    real_t maxval = logit[0], minval = logit[0], target_logit = logit[target];  // read before p may overwrite it
    // x * 0 is 0 for every finite x: the sum stays 0 unless a logit is NaN or
    // infinite (the maximum's and minimum's reductions may pass over a NaN)
    real_t nonfinite_probe = logit[0] * 0;
#pragma omp simd reduction(max : maxval) reduction(min : minval) reduction(+ : nonfinite_probe)
    for (int i = 1; i < V; i++) {  // vectorised; the logits' one trip from memory
        maxval = logit[i] > maxval ? logit[i] : maxval;
        minval = logit[i] < minval ? logit[i] : minval;
        nonfinite_probe += logit[i] * 0;
    }
    real_t sum = 0;  // summed in vector lanes, then across them: the same order every time
#ifdef SHARDLAB_REAL_DOUBLE
    (void)minval;  // libm's exp checks every element itself
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; i++) {
        p[i] = exp_elementwise(logit[i] - maxval);
        sum += p[i];
    }
#else
    // Where every logit - maxval lies in [-87, 0] (x - maxval is monotonic in x,
    // so the row's smallest tells), the whole groups need no lane checks: the
    // same bits as exp_lanes, and the checks took a seventh of the forward's time.
    int skip_lane_checks = nonfinite_probe == 0 && minval - maxval >= -87.0f;
    int checked_from = skip_lane_checks ? V / LANES * LANES : 0;
    lanes_f sums = splat(0.0f);
    int i = 0;
    for (; i < checked_from; i += LANES) {
        lanes_f e = exp_lanes_in_range(load_lanes(logit + i, LANES, 0.0f) - maxval);
        store_lanes(p + i, e, LANES);
        sums += e;
    }
    for (; i < V; i += LANES) {  // a partial last group padded with -inf: e^-inf = 0 adds nothing
        int count = V - i < LANES ? V - i : LANES;
        lanes_f e = exp_lanes(load_lanes(logit + i, count, -INFINITY) - maxval);
        store_lanes(p + i, e, count);
        sums += e;
    }
    for (int k = 0; k < LANES; k++) sum += sums[k];  // vectorised
#endif
#pragma omp simd
    for (int i = 0; i < V; i++) p[i] = p[i] / sum * scale;
    for (int i = V; i < Vp; i++) p[i] = 0;
    return log(sum) - (target_logit - maxval);  // -log(p[target]), exp and log undone
}

// One row's dlogits = dloss * (p - onehot(target)) from its probabilities p,
// which dl may overwrite (the fused path scales in softmax_row instead); padded
// columns get 0.
static void crossentropy_grad_row(real_t *dl, const real_t *p, int target, real_t dloss, int V, int Vp) {
    for (int i = 0; i < V; i++) dl[i] = p[i] * dloss;  // vectorised
    for (int i = V; i < Vp; i++) dl[i] = 0;
    dl[target] -= dloss;
}

void softmax_crossentropy_forward(real_t *losses, real_t *probs, const real_t *logits,
                                  const int *targets, int B, int T, int V, int Vp) {
#pragma omp parallel for
    for (int row = 0; row < B * T; row++)
        losses[row] = softmax_row(probs + (size_t)row * Vp, logits + (size_t)row * Vp, targets[row], V, Vp, 1);
}

void softmax_crossentropy_backward(real_t *dlogits, const real_t *probs, const int *targets,
                                   real_t dloss, int B, int T, int V, int Vp) {
#pragma omp parallel for
    for (int row = 0; row < B * T; row++)
        crossentropy_grad_row(dlogits + (size_t)row * Vp, probs + (size_t)row * Vp, targets[row], dloss, V, Vp);
}

void softmax_crossentropy_fused(real_t *losses, real_t *logits, const int *targets, real_t dloss, int B, int T,
                                int V, int Vp) {
#pragma omp parallel for
    for (int row = 0; row < B * T; row++) {
        real_t *x = logits + (size_t)row * Vp;
        losses[row] = softmax_row(x, x, targets[row], V, Vp, dloss);  // dloss * p: crossentropy_grad_row's rounding
        x[targets[row]] -= dloss;
    }
}
