// Whole-model checks on a tiny GPT-2: gradients against finite differences of
// the loss, unit by unit execution, the tied embedding, results that do not
// depend on the thread count (nor, in the vectorised element-wise loops, on
// whether an element falls in a vector or in the loop's scalar remainder), and
// the per-op timing table.
#include <cblas.h>
#include <check.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/timer.h"
#include "models/gpt2.h"
#include "models/gpt2_ops.h"
#include "tests/check_main.h"

typedef struct {
    MemAccount mem;
    GPT2 model;
    float *params, *grads;
    int inputs[2 * 5], targets[2 * 5];
} Tiny;

static void tiny_init_keeping(Tiny *t, ClassifierKeeps classifier) {
    memset(t, 0, sizeof *t);
    GPT2Config c = {.max_seq_len = 7, .vocab_size = 11, .padded_vocab_size = 16, .num_layers = 2,
                    .num_heads = 2, .channels = 6};
    gpt2_init(&t->model, c, 2, 5, 0, ATTENTION_KEEPS_PROBABILITIES, classifier, &t->mem);
    const GPT2Layout *l = &t->model.layout;
    t->params = mem_alloc_floats(&t->mem, MEM_PARAMS, l->num_params);
    t->grads = mem_alloc_floats(&t->mem, MEM_GRADS, l->num_params);
    for (int k = 0; k < l->num_tensors; k++)
        gpt2_init_rows(l, k, 7, 0, l->tensors[k].rows, t->params + l->tensors[k].offset);
    // larger weights than GPT-2's 0.02 so every path carries a visible gradient
    for (size_t i = 0; i < l->num_params; i++) t->params[i] *= 5.0f;
    for (int k = 0; k < l->num_tensors; k++)  // keep the padded vocab rows at zero
        if (l->tensors[k].kind == GPT2_WTE)
            memset(t->params + l->tensors[k].offset + 11 * 6, 0, 5 * 6 * sizeof(float));
    gpt2_point_into_flat(l, t->params, t->model.params);
    gpt2_point_into_flat(l, t->grads, t->model.grads);
    for (int i = 0; i < 10; i++) {
        t->inputs[i] = (3 * i + 1) % 11;
        t->targets[i] = (5 * i + 2) % 11;
    }
    gpt2_set_batch(&t->model, t->inputs, t->targets);
}

static void tiny_init(Tiny *t) { tiny_init_keeping(t, CLASSIFIER_KEEPS_PROBABILITIES); }

static void tiny_free(Tiny *t) {
    size_t n = t->model.layout.num_params;
    mem_free_floats(&t->mem, MEM_PARAMS, t->params, n);
    mem_free_floats(&t->mem, MEM_GRADS, t->grads, n);
    gpt2_free(&t->model, &t->mem);
    ck_assert_uint_eq(t->mem.total_current, 0);
}

static double loss_at(Tiny *t) {
    for (int u = 0; u < t->model.layout.num_units; u++) gpt2_forward_unit(&t->model, u);
    return t->model.mean_loss;
}

static void backward(Tiny *t) {
    memset(t->grads, 0, t->model.layout.num_params * sizeof(float));
    loss_at(t);
    for (int u = t->model.layout.num_units - 1; u >= 0; u--) gpt2_backward_unit(&t->model, u);
}

// For each tensor: move along a random direction d restricted to it, and compare
// (L(p + h d) - L(p - h d)) / 2h with grad . d. In float, a directional check is
// far better conditioned than one element at a time.
static void check_finite_differences(float dropout) {
    Tiny t;
    tiny_init(&t);
    t.model.dropout = dropout;  // every site: the embeddings, attention, both projections
    t.model.dropout_seed = 5;
    t.model.dropout_step = dropout > 0 ? 3 : 0;
    backward(&t);
    const GPT2Layout *l = &t.model.layout;
    unsigned seed = 99;
    for (int k = 0; k < l->num_tensors; k++) {
        const GPT2Tensor *tensor = &l->tensors[k];
        size_t rows = tensor->kind == GPT2_WTE ? 11 : (size_t)tensor->rows;  // no padding rows
        size_t n = rows * tensor->cols;
        float *p = t.params + tensor->offset;
        float *d = malloc(n * sizeof(float));
        double gd = 0, dd = 0;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            d[i] = (float)((double)(seed >> 8) / 16777216.0 - 0.5);
            gd += (double)t.grads[tensor->offset + i] * d[i];
            dd += (double)d[i] * d[i];
        }
        const float h = 1e-3f / (float)sqrt(dd);
        float *saved = malloc(n * sizeof(float));
        memcpy(saved, p, n * sizeof(float));
        for (size_t i = 0; i < n; i++) p[i] = saved[i] + h * d[i];
        double up = loss_at(&t);
        for (size_t i = 0; i < n; i++) p[i] = saved[i] - h * d[i];
        double down = loss_at(&t);
        memcpy(p, saved, n * sizeof(float));
        double numeric = (up - down) / (2.0 * h);
        ck_assert_msg(fabs(numeric - gd) <= 2e-3 + 2e-2 * fabs(gd), "%s: grad.d %.6g, numeric %.6g",
                      tensor->name, gd, numeric);
        ck_assert_msg(fabs(gd) > 1e-4, "%s: gradient is (nearly) zero; the check would be vacuous", tensor->name);
        free(d);
        free(saved);
    }
    tiny_free(&t);
}

START_TEST(test_gradients_match_finite_differences) { check_finite_differences(0); }
END_TEST

// With dropout the loss is a fixed function of the parameters for a fixed seed,
// step and rows (the masks do not change between the calls): every site's
// backward must scale what it keeps by 1 / (1 - RATE) as its forward does.
START_TEST(test_gradients_with_dropout_match_finite_differences) { check_finite_differences(0.2f); }
END_TEST

// The attention dropout's mask, recomputed here from its documentation
// (dropout.h, gpt2_dropout): with q = k = 0 every position attends evenly to
// those before it, and with v[t2] a one-hot column per (head, t2) the output
// shows each probability the mask kept, scaled, and a 0 where it dropped one.
// Two heads, two layers, two ranks' rows (row0 0 and 4): each its own mask.
static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

START_TEST(test_attention_dropout_mask_is_the_documented_one) {
    enum { B = 1, T = 4, NH = 2, HS = 4, C = NH * HS };
    float qkv[B * T * 3 * C] = {0}, out[B * T * C], att[B * NH * T * T], scratch[B * NH * T * T];
    for (int h = 0; h < NH; h++)
        for (int t2 = 0; t2 < T; t2++) qkv[t2 * 3 * C + 2 * C + h * HS + t2] = 1;  // v[t2] = e(h, t2)
    Tiny t;
    tiny_init(&t);
    t.model.dropout = 0.5f;
    t.model.dropout_seed = 11;
    t.model.dropout_step = 2;
    int dropped = 0, kept = 0, differ_by_head = 0, differ_by_layer = 0, differ_by_rank = 0;
    int seen[2][2][NH][T][T];
    for (int layer = 0; layer < 2; layer++)
        for (int rank = 0; rank < 2; rank++) {
            t.model.row0 = 4 * rank;
            Dropout storage;
            const Dropout *drop = gpt2_dropout(&t.model, layer, DROPOUT_ATTENTION, &storage);
            attention_forward(out, att, qkv, scratch, drop, B, T, C, NH);
            uint64_t key = mix(11 ^ 0x64726F706F7574ull);  // the seed's own stream ("dropout")
            key = mix(mix(key + 2) + (uint64_t)(4 * layer + DROPOUT_ATTENTION));
            for (int h = 0; h < NH; h++)
                for (int p = 0; p < T; p++)
                    for (int t2 = 0; t2 <= p; t2++) {
                        uint64_t row_key = mix(mix(key + (uint64_t)(4 * rank)) + (uint64_t)p);
                        int keep = (uint32_t)(mix(row_key + (uint64_t)(h * T + t2)) >> 40) >= (uint32_t)(0.5 * 16777216.0);
                        float want = keep ? 2.0f / (float)(p + 1) : 0;
                        ck_assert_msg(fabsf(out[p * C + h * HS + t2] - want) <= 1e-6f,
                                      "layer %d rank %d head %d: position %d, key %d: %g, the documented mask gives %g",
                                      layer, rank, h, p, t2, out[p * C + h * HS + t2], want);
                        seen[layer][rank][h][p][t2] = keep;
                        keep ? kept++ : dropped++;
                        differ_by_head += h == 1 && keep != seen[layer][rank][0][p][t2];
                        differ_by_rank += rank == 1 && keep != seen[layer][0][h][p][t2];
                        differ_by_layer += layer == 1 && keep != seen[0][rank][h][p][t2];
                    }
        }
    ck_assert_msg(kept > 0 && dropped > 0 && differ_by_head > 0 && differ_by_layer > 0 && differ_by_rank > 0,
                  "the masks differ by head (%d), layer (%d) and rank (%d); %d kept, %d dropped", differ_by_head,
                  differ_by_layer, differ_by_rank, kept, dropped);
    tiny_free(&t);
}
END_TEST

// e^x against libm's in double over the whole range the loops use, within the
// 4 ulps gpt2_ops.h promises (the series is within 6e-9; the rest is float
// rounding of r, the series' terms and the final product): a range reduction
// that lost ln 2's low part is off by 1.6e-4 at x = -80.
START_TEST(test_exp_against_double) {
    double worst = 0;
    for (int i = 0; i <= 175000; i++) {
        float x = fminf(-87.0f + (float)i * 1e-3f, 88.0f);
        double want = exp((double)x), got = exp_element(x);
        double ulps = fabs(got - want) / (nextafterf((float)want, INFINITY) - (float)want);
        if (ulps > worst) worst = ulps;
        ck_assert_msg(ulps <= 4, "exp(%a) = %a, libm %a: %.1f ulps", x, got, want, ulps);
    }
    ck_assert(exp_element(-88.0f) == 0 && exp_element(-1e30f) == 0 && exp_element(1e30f) == exp_element(88.0f));
    ck_assert(isnan(exp_element(NAN)) && exp_element(INFINITY) == exp_element(88.0f) && exp_element(-INFINITY) == 0);
    ck_assert_msg(worst > 0, "the comparison ran");
}
END_TEST

// The vector exp takes a shorter path for a group of lanes all in [-87, 88], and
// clamps and selects where one is not: an element must get the same bits either
// way, wherever its neighbours fall. GELU's exp(-2u) leaves the range for x = -50
// (u far below -44): every eighth element is -50 in one copy and 0.5 in the other
// (so every group of 8 or 16 lanes of the first holds one, none of the second).
START_TEST(test_exp_same_bits_in_any_group) {
    enum { N = 4096 };
    static float mixed[N], plain[N], out_mixed[N], out_plain[N];
    unsigned state = 7;
    for (int i = 0; i < N; i++) {
        state = state * 1664525u + 1013904223u;
        plain[i] = mixed[i] = -4.0f + 8.0f * (float)(state >> 8) / (float)(1u << 24);
        if (i % 8 == 0) mixed[i] = -50.0f, plain[i] = 0.5f;
    }
    gelu_forward(out_mixed, mixed, N);
    gelu_forward(out_plain, plain, N);
    for (int i = 0; i < N; i++)
        if (i % 8 != 0)
            ck_assert_msg(memcmp(&out_mixed[i], &out_plain[i], sizeof(float)) == 0,
                          "gelu(%a): %a beside an out-of-range lane, %a without", plain[i], out_mixed[i], out_plain[i]);
}
END_TEST

// GELU's tanh form and its derivative against the same formulas in double
// (libm's exp), over [-87, 88]: within 4 + 4|u| float ulps (u is a float, and
// e^(-2u) multiplies its rounding by 2|u|), or 1e-36 absolute where it vanishes
// (e^(-2u) stops at e^88: x / e^88 is left).
START_TEST(test_gelu_against_double) {
    enum { N = 17501 };
    static float x[N], out[N], dout[N], dx[N];
    for (int i = 0; i < N; i++) {
        x[i] = -87.0f + (float)i * 0.01f;
        dout[i] = 1.0f;
        dx[i] = 0;
    }
    gelu_forward(out, x, N);
    gelu_backward(dx, x, dout, N);
    for (int i = 0; i < N; i++) {
        // (1 + tanh u) / 2 = 1 / (1 + e^(-2u)) = sg, and 1 - sg, each without cancellation
        double v = x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v), e = exp(-2 * fabs(u));
        double sg = u >= 0 ? 1 / (1 + e) : e / (1 + e), one_minus = u >= 0 ? e / (1 + e) : 1 / (1 + e);
        double want = v * sg;
        double want_dx = sg + 2 * v * sg * one_minus * 0.7978845608028654 * (1 + 3 * 0.044715 * v * v);
        // u itself is a float (a few ulps of it): e^(-2u) carries 2|u| times u's relative error
        double rel = (4 + 4 * fabs(u)) * 6e-8;
        ck_assert_msg(fabs(out[i] - want) <= rel * fabs(want) + 1e-36, "gelu(%g) = %.9g, want %.9g", v, out[i], want);
        ck_assert_msg(fabs(dx[i] - want_dx) <= rel * fmax(1, fabs(want_dx)) + 1e-36, "gelu'(%g) = %.9g, want %.9g", v,
                      dx[i], want_dx);
    }
}
END_TEST

// The softmax subtracts each row's largest logit first: logits far above e^x's
// range (+100, +1000) give the same loss and probabilities as the same logits
// near 0, and the loss is finite.
START_TEST(test_softmax_is_shift_invariant) {
    enum { V = 19, Vp = 24 };
    float logits[Vp], shifted[Vp], probs[Vp], probs_shifted[Vp], loss, loss_shifted;
    int target = 7;
    for (float shift = 100; shift <= 1000; shift *= 10) {
        for (int i = 0; i < Vp; i++) {
            logits[i] = i < V ? 0.25f * (float)((i * 7) % 11) - 1 : 0;
            shifted[i] = i < V ? logits[i] + shift : 0;
        }
        softmax_crossentropy_forward(&loss, probs, logits, &target, 1, 1, V, Vp);
        softmax_crossentropy_forward(&loss_shifted, probs_shifted, shifted, &target, 1, 1, V, Vp);
        ck_assert_msg(isfinite(loss_shifted) && fabsf(loss_shifted - loss) <= 1e-5f * loss,
                      "shift %g: loss %.7g, unshifted %.7g", shift, loss_shifted, loss);
        for (int i = 0; i < V; i++)
            ck_assert_msg(fabsf(probs_shifted[i] - probs[i]) <= 1e-5f, "shift %g: p[%d] %g against %g", shift, i,
                          probs_shifted[i], probs[i]);
    }
}
END_TEST

enum { ROW_V = 1007, ROW_VP = 1040 };  // V + 1 fills whole groups of 8 and of 16 lanes

// A row of V logits in [-5, 5) drawn from `seed`; its padded columns hold 3, which a group read past V would add.
static void random_row(float *logits, uint32_t seed) {
    for (int i = 0; i < ROW_VP; i++) {
        seed = seed * 1664525u + 1013904223u;
        logits[i] = i < ROW_V ? (float)(seed >> 8) / (1 << 24) * 10 - 5 : 3;
    }
}

// The row's probabilities and loss are the same bits as the row's with one logit more, -200, which turns the
// exp's lane checks on: its e^x is exactly 0 and adds nothing.
static void check_same_bits_with_low(const float *logits, int target) {
    float *probs = malloc(ROW_VP * sizeof(float)), *with_low = malloc(ROW_VP * sizeof(float));
    float *probs_low = malloc(ROW_VP * sizeof(float)), loss, loss_low;
    memcpy(with_low, logits, ROW_VP * sizeof(float));
    with_low[ROW_V] = -200;
    softmax_crossentropy_forward(&loss, probs, logits, &target, 1, 1, ROW_V, ROW_VP);
    softmax_crossentropy_forward(&loss_low, probs_low, with_low, &target, 1, 1, ROW_V + 1, ROW_VP);
    ck_assert_msg(probs_low[ROW_V] == 0, "e^-200 is not 0: %g", probs_low[ROW_V]);
    ck_assert_msg(memcmp(&loss, &loss_low, sizeof loss) == 0, "loss %.9g, with lane checks %.9g", loss, loss_low);
    for (int i = 0; i < ROW_V; i++)
        ck_assert_msg(memcmp(&probs[i], &probs_low[i], sizeof(float)) == 0, "p[%d] %.9g, with lane checks %.9g", i,
                      probs[i], probs_low[i]);
    free(probs), free(with_low), free(probs_low);
}

// A row whose logits all lie within 87 of its largest skips the exp's lane checks; one logit far below turns
// them on, the same bits.
START_TEST(test_softmax_same_bits_with_lane_checks) {
    float *logits = malloc(ROW_VP * sizeof(float)), *probs = malloc(ROW_VP * sizeof(float)), loss;
    random_row(logits, 7);
    check_same_bits_with_low(logits, 611);
    // a NaN first logit, which the maximum's reduction may pass over, still makes the row NaN
    logits[0] = NAN;
    int target = 611;
    softmax_crossentropy_forward(&loss, probs, logits, &target, 1, 1, ROW_V, ROW_VP);
    ck_assert_msg(isnan(loss) && isnan(probs[1]) && isnan(probs[ROW_V - 1]), "NaN logit: loss %g, p %g ... %g", loss,
                  probs[1], probs[ROW_V - 1]);
    free(logits), free(probs);
}
END_TEST

// A row whose logits span [-87.5, 0] below its largest: one exp's argument is below -87, where the
// unchecked vector exp is out of its range (2^-127 is subnormal), so the row must take the checked path.
START_TEST(test_softmax_lane_check_bound) {
    float *logits = malloc(ROW_VP * sizeof(float));
    random_row(logits, 11);
    logits[0] = 5;      // the row's largest
    logits[8] = -82.5f; // 87.5 below it: e^-87.5 = 1.0e-38, below FLT_MIN (the checked exp's 0)
    check_same_bits_with_low(logits, 8);
    free(logits);
}
END_TEST

// Attention's softmax subtracts each row's largest score: scores of a few hundred (e^400 overflows a
// float) give the probabilities of their differences. T = 2, one head of 4: position 1's scores are 400
// and 399, so it takes e/(1+e) of v0 and 1/(1+e) of v1; position 0 takes v0 whole.
START_TEST(test_attention_softmax_is_shifted) {
    enum { T = 2, C = 4 };
    float qkv[T * 3 * C] = {0}, out[T * C], att[T * T];
    float a = sqrtf(200.0f);  // q.k / sqrt(4) = 4 a^2 / 2 = 400
    for (int i = 0; i < C; i++) {
        qkv[0 * 3 * C + C + i] = a;           // k0
        qkv[1 * 3 * C + i] = a;               // q1
        qkv[1 * 3 * C + C + i] = a * (1 - 1.0f / 800);  // k1: a score 1/2 lower... times 2: 399
    }
    qkv[0 * 3 * C + 2 * C + 0] = 1;  // v0 = e0
    qkv[1 * 3 * C + 2 * C + 1] = 1;  // v1 = e1
    attention_forward(out, att, qkv, NULL, NULL, 1, T, C, 1);
    double s1 = 400.0 * (1 - 1.0 / 800), p0 = 1 / (1 + exp(s1 - 400));  // the scores as the float product gives them
    ck_assert_msg(isfinite(out[C]) && isfinite(out[C + 1]), "position 1: %g %g (an unshifted softmax overflows)",
                  out[C], out[C + 1]);
    ck_assert_msg(fabs(out[C] - p0) < 1e-4 && fabs(out[C + 1] - (1 - p0)) < 1e-4, "position 1: %g %g, want %g %g",
                  out[C], out[C + 1], p0, 1 - p0);
    ck_assert_msg(out[0] == 1 && out[1] == 0, "position 0: %g %g, want v0", out[0], out[1]);
}
END_TEST

// The head reads wte for every vocab row, the embedding only for the rows of
// the inputs: a row no input uses still gets a gradient (from the head alone),
// and it equals the head's contribution computed separately.
START_TEST(test_tied_embedding_sums_both_uses) {
    Tiny t;
    tiny_init(&t);
    const GPT2Layout *l = &t.model.layout;
    int head = l->num_units - 1;
    float *wte_grad = t.grads + l->tensors[gpt2_tensor_id(l, GPT2_WTE, 0)].offset;
    memset(t.grads, 0, l->num_params * sizeof(float));
    loss_at(&t);
    gpt2_backward_unit(&t.model, head);
    float *head_only = malloc(11 * 6 * sizeof(float));
    memcpy(head_only, wte_grad, 11 * 6 * sizeof(float));
    for (int u = head - 1; u >= 0; u--) gpt2_backward_unit(&t.model, u);
    int used[11] = {0};
    for (int i = 0; i < 10; i++) used[t.inputs[i]] = 1;
    int unused_rows = 0;
    for (int row = 0; row < 11; row++) {
        double diff = 0;
        for (int c = 0; c < 6; c++) diff += fabs(wte_grad[row * 6 + c] - head_only[row * 6 + c]);
        if (used[row]) ck_assert_msg(diff > 0, "row %d: embedding use added nothing", row);
        else { ck_assert_double_eq(diff, 0); unused_rows++; }
    }
    ck_assert_int_gt(unused_rows, 0);
    free(head_only);
    tiny_free(&t);
}
END_TEST

// Loss and gradients of one forward + backward on `threads` threads.
static float *grads_on_threads(Tiny *t, int threads, float *loss) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    backward(t);
    *loss = t->model.mean_loss;
    size_t bytes = t->model.layout.num_params * sizeof(float);
    float *copy = malloc(bytes);
    memcpy(copy, t->grads, bytes);
    return copy;
}

// Every layer splits its work among threads so that each number is computed
// the same way whatever their count (attention by (batch, head), sums over
// rows by columns): 1 and 3 threads (an uneven split of the 2 x 2 pairs and of
// every row count here) give the same bits.
START_TEST(test_results_do_not_depend_on_thread_count) {
    Tiny t;
    tiny_init(&t);
    float loss1, loss3;
    float *one = grads_on_threads(&t, 1, &loss1), *three = grads_on_threads(&t, 3, &loss3);
    ck_assert_msg(memcmp(&loss1, &loss3, sizeof loss1) == 0, "loss %.9g on 1 thread, %.9g on 3", loss1, loss3);
    for (size_t i = 0; i < t.model.layout.num_params; i++)
        ck_assert_msg(memcmp(&one[i], &three[i], sizeof(float)) == 0, "gradient %zu: %.9g on 1 thread, %.9g on 3",
                      i, one[i], three[i]);
    free(one);
    free(three);
    tiny_free(&t);
}
END_TEST

// --fused-classifier: the forward writes the loss's gradient over the logits and
// keeps no probabilities, (B, T, Vp) = 2 x 5 x 16 floats fewer; the loss and
// every gradient are the same bits as the two passes'. Twice in a row, as a
// training run does (the second forward overwrites the first one's dlogits).
START_TEST(test_fused_classifier_is_the_same_bits) {
    Tiny plain, fused;
    tiny_init(&plain);
    tiny_init_keeping(&fused, CLASSIFIER_FUSED);
    ck_assert_ptr_null(fused.model.acts.probs);
    ck_assert_uint_eq(plain.model.num_acts - fused.model.num_acts, 2 * 5 * 16);
    for (int pass = 0; pass < 2; pass++) {
        backward(&plain);
        backward(&fused);
        ck_assert_msg(memcmp(&plain.model.mean_loss, &fused.model.mean_loss, sizeof(float)) == 0,
                      "loss %.9g, fused %.9g", plain.model.mean_loss, fused.model.mean_loss);
        for (size_t i = 0; i < plain.model.layout.num_params; i++)
            ck_assert_msg(memcmp(&plain.grads[i], &fused.grads[i], sizeof(float)) == 0,
                          "pass %d, gradient %zu: %.9g, fused %.9g", pass, i, plain.grads[i], fused.grads[i]);
    }
    tiny_free(&plain);
    tiny_free(&fused);
}
END_TEST

// With model->op_times set, every op kind reports time in each pass it runs
// in (the residual's backward is no call: 0), the times fit inside the passes
// that contain them, and the numbers the model computes do not change.
// GELU's loops run in vector lanes with a scalar remainder, and the threads cut
// the elements anywhere: each element must come out the same bits either way,
// computed among 1003 others or alone. The inputs span GELU's range and beyond,
// where its exp saturates (x = -60: e^(-2u) past float's largest).
START_TEST(test_gelu_lanes_match_the_remainder) {
    enum { N = 1003 };
    float x[N], out[N], dout[N], dx[N], one_out, one_dx;
    for (int i = 0; i < N; i++) {
        x[i] = -60.0f + 120.0f * (float)i / N;
        dout[i] = 1.0f - (float)(i % 7) / 3;
        dx[i] = 0.25f;
    }
    gelu_forward(out, x, N);
    gelu_backward(dx, x, dout, N);
    for (int i = 0; i < N; i++) {
        one_dx = 0.25f;
        gelu_forward(&one_out, &x[i], 1);
        gelu_backward(&one_dx, &x[i], &dout[i], 1);
        ck_assert_msg(memcmp(&one_out, &out[i], sizeof one_out) == 0 && memcmp(&one_dx, &dx[i], sizeof one_dx) == 0,
                      "x = %g: %a %a alone, %a %a in the array", x[i], one_out, one_dx, out[i], dx[i]);
        ck_assert_msg(isfinite(out[i]) && isfinite(dx[i]), "x = %g: %g %g", x[i], out[i], dx[i]);
    }
}
END_TEST

START_TEST(test_op_times) {
    Tiny t;
    tiny_init(&t);
    size_t bytes = t.model.layout.num_params * sizeof(float);
    backward(&t);
    float *untimed = malloc(bytes);
    memcpy(untimed, t.grads, bytes);
    float untimed_loss = t.model.mean_loss;

    GPT2OpTimes times = {0};
    t.model.op_times = &times;
    double start = timer_now();
    backward(&t);
    double elapsed = timer_now() - start;
    ck_assert_msg(memcmp(untimed, t.grads, bytes) == 0, "timing the ops changed the gradients");
    ck_assert(memcmp(&untimed_loss, &t.model.mean_loss, sizeof untimed_loss) == 0);
    double sum = 0;
    for (int op = 0; op < GPT2_NUM_OPS; op++) {
        ck_assert_msg(times.forward_s[op] > 0, "%s: no forward time", gpt2_op_names[op]);
        if (op == GPT2_OP_RESIDUAL) ck_assert_double_eq(times.backward_s[op], 0);
        else ck_assert_msg(times.backward_s[op] > 0, "%s: no backward time", gpt2_op_names[op]);
        sum += times.forward_s[op] + times.backward_s[op];
    }
    ck_assert_msg(sum <= elapsed, "the ops' times add up to %.9g s, more than the %.9g s around them", sum, elapsed);
    free(untimed);
    tiny_free(&t);
}
END_TEST

START_TEST(test_token_out_of_vocab_is_rejected) {
    Tiny t;
    tiny_init(&t);
    t.inputs[3] = 11;  // V = 11
    gpt2_set_batch(&t.model, t.inputs, t.targets);
}
END_TEST

// Every position once, grouped by token in increasing token order, each
// token's positions in increasing order: the order the GPU's embedding
// backward sums in.
START_TEST(test_positions_by_token) {
    enum { n = 23, V = 5 };
    int inputs[n], order[n], seen[n] = {0};
    for (int i = 0; i < n; i++) inputs[i] = (i * 3 + i / 4) % V;
    inputs[n - 1] = V - 1;
    gpt2_positions_by_token(order, inputs, n, V);
    for (int j = 0; j < n; j++) {
        ck_assert(order[j] >= 0 && order[j] < n && !seen[order[j]]);
        seen[order[j]] = 1;
        if (j == 0) continue;
        int prev = inputs[order[j - 1]], cur = inputs[order[j]];
        ck_assert_msg(prev < cur || (prev == cur && order[j - 1] < order[j]), "order breaks at %d", j);
    }
}
END_TEST

START_TEST(test_presets) {
    GPT2Config c;
    ck_assert_int_eq(gpt2_config_preset("d12", 0, &c), 0);
    GPT2Layout l;
    gpt2_layout_init(&l, c);
    ck_assert_uint_eq(l.num_params, 124475904);  // GPT-2 124M with the vocab padded to 50304
    ck_assert_int_eq(c.padded_vocab_size, 50304);
    gpt2_layout_free(&l);
    ck_assert_int_eq(gpt2_config_preset("d5", 0, &c), -1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("gpt2");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_gradients_match_finite_differences);
    tcase_add_test(tc, test_gradients_with_dropout_match_finite_differences);
    tcase_add_test(tc, test_attention_dropout_mask_is_the_documented_one);
    tcase_add_test(tc, test_exp_against_double);
    tcase_add_test(tc, test_exp_same_bits_in_any_group);
    tcase_add_test(tc, test_gelu_against_double);
    tcase_add_test(tc, test_softmax_is_shift_invariant);
    tcase_add_test(tc, test_softmax_same_bits_with_lane_checks);
    tcase_add_test(tc, test_softmax_lane_check_bound);
    tcase_add_test(tc, test_attention_softmax_is_shifted);
    tcase_add_test(tc, test_tied_embedding_sums_both_uses);
    tcase_add_test(tc, test_results_do_not_depend_on_thread_count);
    tcase_add_test(tc, test_gelu_lanes_match_the_remainder);
    tcase_add_test(tc, test_fused_classifier_is_the_same_bits);
    tcase_add_test(tc, test_op_times);
    tcase_add_exit_test(tc, test_token_out_of_vocab_is_rejected, 1);
    tcase_add_test(tc, test_positions_by_token);
    tcase_add_test(tc, test_presets);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
