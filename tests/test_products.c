// The products' engine (models/products.c): which engine and which entry each of
// the model's products takes on this CPU's instruction set (the rule, pinned
// here so that a routing change is a decision a test names), the override, and
// the widened bf16 path across its tiles. Check runs each test in a child of its
// own, so a test that sets SHARDLAB_PRODUCTS sees its own choice.
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models/gpt2_ops.h"
#include "tests/check_main.h"

typedef struct {
    const char *isa, *engine;
    const char *forward, *dinp, *dweight;  // fp32 products: out = inp W^T, dinp = dout W, dweight += dout^T inp
    const char *bf16_forward;              // bf16 operands: forward; the backward's follow the same rule
} Rule;

// docs/performance.md's table, as measured
static const Rule rules[] = {
    {"sse41", "OpenBLAS", "OpenBLAS sgemm", "OpenBLAS sgemm", "OpenBLAS sgemm", "widened, OpenBLAS sgemm"},
    {"avx", "OpenBLAS", "OpenBLAS sgemm", "OpenBLAS sgemm", "OpenBLAS sgemm", "widened, OpenBLAS sgemm"},
    {"avx2", "OpenBLAS", "OpenBLAS sgemm", "OpenBLAS sgemm", "OpenBLAS sgemm", "widened, OpenBLAS sgemm"},
    {"avx2_vnni", "OpenBLAS", "OpenBLAS sgemm", "OpenBLAS sgemm", "OpenBLAS sgemm", "widened, OpenBLAS sgemm"},
    {"avx512_core", "oneDNN", "oneDNN matmul", "oneDNN sgemm", "oneDNN sgemm", "widened, oneDNN matmul"},
    {"avx512_core_vnni", "oneDNN", "oneDNN matmul", "oneDNN sgemm", "oneDNN sgemm", "widened, oneDNN matmul"},
    {"avx512_core_bf16", "oneDNN", "oneDNN matmul", "oneDNN sgemm", "oneDNN sgemm", "oneDNN bf16 matmul"},
    {"avx512_core_amx", "oneDNN", "oneDNN matmul", "oneDNN sgemm", "oneDNN sgemm", "oneDNN bf16 matmul"},
};

static const Rule *rule_for(const char *isa) {
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].isa, isa) == 0) return &rules[i];
    ck_abort_msg("oneDNN's instruction set '%s' has no rule here", isa);
    return NULL;
}

START_TEST(test_each_product_takes_the_rules_entry) {
    unsetenv("SHARDLAB_PRODUCTS");
    ProductEngine engine = product_engine();
    const Rule *rule = rule_for(engine.isa);
    ck_assert_str_eq(engine.engine, rule->engine);
    ck_assert_str_eq(engine.chosen_by, "the rule for this instruction set");
    ck_assert_str_eq(product_route('N', 'T', DTYPE_FP32), rule->forward);
    ck_assert_str_eq(product_route('N', 'N', DTYPE_FP32), rule->dinp);
    ck_assert_str_eq(product_route('T', 'N', DTYPE_FP32), rule->dweight);
    ck_assert_str_eq(product_route('N', 'T', DTYPE_BF16), rule->bf16_forward);
    int kernel = strncmp(rule->bf16_forward, "widened", 7) != 0;
    ck_assert_msg(kernel == (strncmp(engine.bf16_kernels, "oneDNN ", 7) == 0), "bf16 operands on '%s' under %s",
                  engine.bf16_kernels, engine.isa);
}
END_TEST

START_TEST(test_the_override_names_its_engine) {
    setenv("SHARDLAB_PRODUCTS", _i ? "openblas" : "onednn", 1);
    ProductEngine engine = product_engine();
    ck_assert_str_eq(engine.engine, _i ? "OpenBLAS" : "oneDNN");
    ck_assert_str_eq(engine.chosen_by, "SHARDLAB_PRODUCTS");
    ck_assert_str_eq(product_route('T', 'N', DTYPE_FP32), _i ? "OpenBLAS sgemm" : "oneDNN sgemm");
    // OpenBLAS has no bf16 kernel: its bf16 operands are always widened
    if (_i) ck_assert_str_eq(product_route('N', 'T', DTYPE_BF16), "widened, OpenBLAS sgemm");
}
END_TEST

// A product spanning several of the widened path's tiles in M (1024), N (4086 at M = 2) and
// K, against the same product in double: each output is a sum of K exact
// products in fp32, in any order within gamma = (K+1) u / (1 - (K+1) u) of the
// sum of magnitudes, plus (a bf16 C) one rounding. Under either engine.
START_TEST(test_widened_tiles_within_the_sums_rounding) {
    setenv("SHARDLAB_PRODUCTS", _i ? "openblas" : "onednn", 1);
    const int shapes[][3] = {{3, 1030, 2100}, {1030, 2, 1100}, {2049, 5, 3}, {2, 4500, 1030}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 3; t++) {
            const char trans[3][2] = {{'N', 'T'}, {'N', 'N'}, {'T', 'N'}};
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            char ta = trans[t][0], tb = trans[t][1];
            int lda = ta == 'T' ? M : K, ldb = tb == 'T' ? K : N;
            bf16 *A = malloc((size_t)M * K * sizeof(bf16)), *B = malloc((size_t)K * N * sizeof(bf16));
            bf16 *C = malloc((size_t)M * N * sizeof(bf16));
            for (size_t i = 0; i < (size_t)M * K; i++) A[i] = bf16_from_float((float)((i * 37) % 19) / 8 - 1);
            for (size_t i = 0; i < (size_t)K * N; i++) B[i] = bf16_from_float((float)((i * 11) % 23) / 16 - 0.5f);
            for (size_t i = 0; i < (size_t)M * N; i++) C[i] = bf16_from_float((float)(i % 5) - 2);
            bf16 *C0 = malloc((size_t)M * N * sizeof(bf16));
            memcpy(C0, C, (size_t)M * N * sizeof(bf16));
            product_bf16(ta, tb, M, N, K, A, lda, B, ldb, 1, C, DTYPE_BF16, N);
            double u = ldexp(1, -24), gamma = (K + 1) * u / (1 - (K + 1) * u);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double exact = bf16_to_float(C0[(size_t)m * N + n]), magnitude = fabs(exact);
                    for (int k = 0; k < K; k++) {
                        float a = bf16_to_float(ta == 'T' ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]);
                        float b = bf16_to_float(tb == 'T' ? B[(size_t)n * ldb + k] : B[(size_t)k * ldb + n]);
                        exact += (double)a * b, magnitude += fabs((double)a * b);
                    }
                    double got = bf16_to_float(C[(size_t)m * N + n]);
                    double bound = gamma * magnitude + ldexp(1, -8) * (fabs(exact) + gamma * magnitude);
                    ck_assert_msg(fabs(got - exact) <= bound, "%s: %c%c %dx%dx%d: C[%d,%d] = %.9g, exactly %.9g",
                                  product_route(ta, tb, DTYPE_BF16), ta, tb, M, N, K, m, n, got, exact);
                }
            free(A), free(B), free(C), free(C0);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("products");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 600);  // a hang guard: the tiles' check takes about a second
    tcase_add_test(tc, test_each_product_takes_the_rules_entry);
    tcase_add_loop_test(tc, test_the_override_names_its_engine, 0, 2);
    tcase_add_loop_test(tc, test_widened_tiles_within_the_sums_rounding, 0, 2);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
