// Every layer's backward against central finite differences, in double
// precision (this test compiles the layers with real_t = double).
// The scalar checked is loss = sum(out * w) for fixed random weights w, whose
// gradient with respect to out is w: the backward is called with dout = w.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2_ops.h"
#include "tests/check_main.h"

static double frand(unsigned *state) {
    *state = *state * 1664525u + 1013904223u;
    return ((double)(*state >> 8) / 16777216.0) * 2.0 - 1.0;
}

// Every array a test makes is remembered and freed after the test.
static void *allocations[64];
static int num_allocations;
static double *zeros(size_t n) {
    double *a = calloc(n, sizeof(double));
    allocations[num_allocations++] = a;
    return a;
}
static void free_allocations(void) {
    while (num_allocations > 0) free(allocations[--num_allocations]);
}

static double *random_array(size_t n, unsigned seed, double scale) {
    double *a = zeros(n);
    for (size_t i = 0; i < n; i++) a[i] = scale * frand(&seed);
    return a;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// Compares analytic[i] with (L(x + h e_i) - L(x - h e_i)) / 2h for every i.
typedef double (*LossFn)(void *ctx);
static void check_gradient(const char *what, double *x, size_t n, const double *analytic, LossFn loss, void *ctx) {
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double up = loss(ctx);
        x[i] = saved - h;
        double down = loss(ctx);
        x[i] = saved;
        double numeric = (up - down) / (2 * h);
        ck_assert_msg(fabs(numeric - analytic[i]) <= 1e-6 + 1e-5 * fabs(numeric),
                      "%s[%zu]: analytic %.10g, numeric %.10g", what, i, analytic[i], numeric);
    }
}

// ---- layernorm ----
typedef struct { int B, T, C; double *inp, *w, *b, *out, *mean, *rstd, *dout; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->B, c->T, c->C);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}
START_TEST(test_layernorm_backward) {
    LnCtx c = {.B = 2, .T = 3, .C = 5};
    size_t n = (size_t)c.B * c.T * c.C;
    c.inp = random_array(n, 1, 1.0); c.w = random_array(c.C, 2, 1.0); c.b = random_array(c.C, 3, 1.0);
    c.dout = random_array(n, 4, 1.0);
    c.out = zeros(n); c.mean = zeros(6); c.rstd = zeros(6);
    double *dinp = zeros(n), *dw = zeros(c.C), *db = zeros(c.C);
    ln_loss(&c);
    layernorm_backward(dinp, dw, db, c.dout, c.inp, c.w, c.mean, c.rstd, c.B, c.T, c.C);
    check_gradient("dinp", c.inp, n, dinp, ln_loss, &c);
    check_gradient("dweight", c.w, c.C, dw, ln_loss, &c);
    check_gradient("dbias", c.b, c.C, db, ln_loss, &c);
}
END_TEST

// ---- matmul ----
typedef struct { int B, T, C, OC; double *inp, *w, *b, *out, *dout; } MmCtx;
static double mm_loss(void *p) {
    MmCtx *c = p;
    matmul_forward(c->out, c->inp, c->w, c->b, c->B, c->T, c->C, c->OC, NULL);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->OC);
}
START_TEST(test_matmul_backward) {
    MmCtx c = {.B = 2, .T = 3, .C = 4, .OC = 5};
    size_t nin = (size_t)c.B * c.T * c.C, nout = (size_t)c.B * c.T * c.OC;
    c.inp = random_array(nin, 5, 1.0); c.w = random_array((size_t)c.OC * c.C, 6, 1.0);
    c.b = random_array(c.OC, 7, 1.0); c.dout = random_array(nout, 8, 1.0); c.out = zeros(nout);
    double *dinp = zeros(nin), *dw = zeros((size_t)c.OC * c.C);
    double *db = zeros(c.OC);
    matmul_backward(dinp, dw, db, c.dout, c.inp, c.w, c.B, c.T, c.C, c.OC, NULL);
    check_gradient("dinp", c.inp, nin, dinp, mm_loss, &c);
    check_gradient("dweight", c.w, (size_t)c.OC * c.C, dw, mm_loss, &c);
    check_gradient("dbias", c.b, c.OC, db, mm_loss, &c);
}
END_TEST

// ---- attention ----
// drop: NULL, or a dropout of the probabilities (the same mask in every call)
typedef struct { int B, T, C, NH; double *qkv, *out, *att, *dout, *scratch; const Dropout *drop; } AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    attention_forward(c->out, c->att, c->qkv, c->scratch, c->drop, c->B, c->T, c->C, c->NH);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}
static void check_attention_backward(const Dropout *drop) {
    AttCtx c = {.B = 2, .T = 4, .C = 6, .NH = 2, .drop = drop};
    size_t nqkv = (size_t)c.B * c.T * 3 * c.C, nout = (size_t)c.B * c.T * c.C;
    c.qkv = random_array(nqkv, 9, 1.0); c.dout = random_array(nout, 10, 1.0);
    c.out = zeros(nout); c.att = zeros((size_t)c.B * c.NH * c.T * c.T);
    c.scratch = zeros((size_t)c.B * c.NH * c.T * c.T);
    double *dqkv = zeros(nqkv), *scratch = zeros((size_t)c.B * c.NH * c.T * c.T);
    att_loss(&c);
    attention_backward(dqkv, c.dout, c.qkv, c.att, scratch, drop, c.B, c.T, c.C, c.NH);
    check_gradient("dqkv", c.qkv, nqkv, dqkv, att_loss, &c);
}
START_TEST(test_attention_backward) { check_attention_backward(NULL); }
END_TEST

// Dropout of the probabilities, P = 0.4: the mask drops some and scales the rest
// by 1/(1-P) in the forward, and the backward goes through the same mask.
static const Dropout test_drop = {.key = 12345, .row0 = 3, .threshold = (uint32_t)(0.4 * 16777216.0),
                                  .scale = 1.0f / 0.6f};
START_TEST(test_attention_backward_with_dropout) { check_attention_backward(&test_drop); }
END_TEST

START_TEST(test_dropout_apply) {
    int B = 3, T = 5, C = 40;
    size_t n = (size_t)B * T * C, dropped = 0;
    double *x = random_array(n, 11, 1.0), *y = zeros(n);
    dropout_apply(y, x, &test_drop, B, T, C);
    for (size_t i = 0; i < n; i++) {
        ck_assert(y[i] == 0 || y[i] == x[i] * (double)test_drop.scale);
        dropped += y[i] == 0;
    }
    ck_assert_msg(dropped > n / 4 && dropped < n * 11 / 20, "%zu of %zu dropped at P = 0.4", dropped, n);
    // the mask is the row's, not the call's: rows 1..2 cut out as their own batch (row0 + 1) get row 1..2's
    Dropout later = test_drop;
    later.row0 = test_drop.row0 + 1;
    double *part = zeros(n);
    dropout_apply(part, x + (size_t)T * C, &later, B - 1, T, C);
    for (size_t i = 0; i < (size_t)(B - 1) * T * C; i++) ck_assert(part[i] == y[(size_t)T * C + i]);
}
END_TEST

START_TEST(test_attention_is_causal) {
    // changing the last time step must not change any earlier output
    AttCtx c = {.B = 1, .T = 4, .C = 4, .NH = 2};
    size_t nqkv = (size_t)c.T * 3 * c.C, nout = (size_t)c.T * c.C;
    c.qkv = random_array(nqkv, 11, 1.0);
    c.out = zeros(nout); c.att = zeros((size_t)c.NH * c.T * c.T);
    double *before = zeros(nout);
    attention_forward(c.out, c.att, c.qkv, NULL, NULL, 1, c.T, c.C, c.NH);
    memcpy(before, c.out, nout * sizeof(double));
    for (int i = 0; i < 3 * c.C; i++) c.qkv[(size_t)(c.T - 1) * 3 * c.C + i] += 1.0;
    attention_forward(c.out, c.att, c.qkv, NULL, NULL, 1, c.T, c.C, c.NH);
    for (size_t i = 0; i < (size_t)(c.T - 1) * c.C; i++) ck_assert_double_eq(before[i], c.out[i]);
}
END_TEST

// ---- gelu ----
typedef struct { int N; double *inp, *out, *dout; } GeluCtx;
static double gelu_loss(void *p) {
    GeluCtx *c = p;
    gelu_forward(c->out, c->inp, c->N);
    return dot(c->out, c->dout, (size_t)c->N);
}
START_TEST(test_gelu_backward) {
    GeluCtx c = {.N = 17};
    c.inp = random_array(c.N, 12, 3.0); c.dout = random_array(c.N, 13, 1.0); c.out = zeros(c.N);
    double *dinp = zeros(c.N);
    gelu_backward(dinp, c.inp, c.dout, c.N);
    check_gradient("dinp", c.inp, c.N, dinp, gelu_loss, &c);
}
END_TEST

// ---- encoder ----
typedef struct { int B, T, C; int *inp; double *wte, *wpe, *out, *dout; } EncCtx;
static double enc_loss(void *p) {
    EncCtx *c = p;
    encoder_forward(c->out, c->inp, c->wte, c->wpe, DTYPE_FP32, c->B, c->T, c->C);
    return dot(c->out, c->dout, (size_t)c->B * c->T * c->C);
}
START_TEST(test_encoder_backward) {
    int inp[6] = {3, 1, 3, 0, 2, 3};  // repeated ids: their gradients must add up
    EncCtx c = {.B = 2, .T = 3, .C = 4, .inp = inp};
    int V = 5;
    size_t nout = (size_t)c.B * c.T * c.C;
    c.wte = random_array((size_t)V * c.C, 14, 1.0); c.wpe = random_array((size_t)c.T * c.C, 15, 1.0);
    c.dout = random_array(nout, 16, 1.0); c.out = zeros(nout);
    double *dwte = zeros((size_t)V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    encoder_backward(dwte, dwpe, DTYPE_FP32, c.dout, c.inp, NULL, c.B, c.T, c.C);
    check_gradient("dwte", c.wte, (size_t)V * c.C, dwte, enc_loss, &c);
    check_gradient("dwpe", c.wpe, (size_t)c.T * c.C, dwpe, enc_loss, &c);
}
END_TEST

// ---- softmax + cross-entropy ----
typedef struct { int B, T, V, Vp; int *targets; double *logits, *probs, *losses; } CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    softmax_crossentropy_forward(c->losses, c->probs, c->logits, c->targets, c->B, c->T, c->V, c->Vp);
    double mean = 0;
    for (int i = 0; i < c->B * c->T; i++) mean += c->losses[i];
    return mean / (c->B * c->T);
}
START_TEST(test_crossentropy_backward) {
    int targets[4] = {0, 4, 2, 4};
    CeCtx c = {.B = 2, .T = 2, .V = 5, .Vp = 8, .targets = targets};
    size_t n = (size_t)c.B * c.T * c.Vp;
    c.logits = random_array(n, 17, 2.0); c.probs = zeros(n); c.losses = zeros(4);
    double *dlogits = zeros(n);
    ce_loss(&c);
    softmax_crossentropy_backward(dlogits, c.probs, c.targets, 1.0 / 4, c.B, c.T, c.V, c.Vp);
    check_gradient("dlogits", c.logits, n, dlogits, ce_loss, &c);  // padded columns: 0 both ways
    for (int row = 0; row < 4; row++)
        for (int i = c.V; i < c.Vp; i++) ck_assert_double_eq(c.probs[row * c.Vp + i], 0.0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("layers");
    TCase *tc = tcase_create("finite differences");
    tcase_add_checked_fixture(tc, NULL, free_allocations);
    tcase_add_test(tc, test_layernorm_backward);
    tcase_add_test(tc, test_matmul_backward);
    tcase_add_test(tc, test_attention_backward);
    tcase_add_test(tc, test_attention_backward_with_dropout);
    tcase_add_test(tc, test_dropout_apply);
    tcase_add_test(tc, test_attention_is_causal);
    tcase_add_test(tc, test_gelu_backward);
    tcase_add_test(tc, test_encoder_backward);
    tcase_add_test(tc, test_crossentropy_backward);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
