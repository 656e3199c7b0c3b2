// AdamW and SGD against steps worked out by hand.
#include <check.h>
#include <math.h>

#include "device/optim.h"
#include "tests/check_main.h"

START_TEST(test_adamw_first_step_by_hand) {
    // step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2, so the update is
    // lr * (g / (|g| + eps) + wd * p) = lr * (sign(g) + wd * p) up to eps.
    float p[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -4.0f, 0.0f}, m[3] = {0}, v[3] = {0};
    AdamWConfig cfg = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};
    adamw_update(p, g, m, v, 3, 1, cfg);
    ck_assert_float_eq_tol(p[0], 1.0f - 0.1f * (1.0f + 0.01f * 1.0f), 1e-6f);
    ck_assert_float_eq_tol(p[1], -2.0f - 0.1f * (-1.0f + 0.01f * -2.0f), 1e-6f);
    ck_assert_float_eq_tol(p[2], 0.5f - 0.1f * (0.0f + 0.01f * 0.5f), 1e-6f);
    ck_assert_float_eq_tol(m[1], -0.4f, 1e-7f);
    ck_assert_float_eq_tol(v[1], 0.016f, 1e-6f);  // 1 - 0.999f is not exactly 0.001
}
END_TEST

START_TEST(test_adamw_second_step_by_hand) {
    float p = 1.0f, m = 0, v = 0;
    AdamWConfig cfg = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f};
    float g1 = 1.0f, g2 = -3.0f;
    adamw_update(&p, &g1, &m, &v, 1, 1, cfg);
    adamw_update(&p, &g2, &m, &v, 1, 2, cfg);
    double m2 = 0.9 * 0.1 * 1.0 + 0.1 * -3.0;       // -0.21
    double v2 = 0.999 * 0.001 * 1.0 + 0.001 * 9.0;  // 0.009999
    double m_hat = m2 / (1 - 0.81), v_hat = v2 / (1 - 0.998001);
    double expected = 1.0 - 0.01 - 0.01 * m_hat / (sqrt(v_hat) + 1e-8);
    ck_assert_double_eq_tol(p, expected, 1e-6);
}
END_TEST

// --ema: two updates worked out by hand (exact in binary): 0.75 * 1 + 0.25 * 3 = 1.5,
// then 0.75 * 1.5 + 0.25 * 3 = 1.875; an element moves toward its own weight only.
START_TEST(test_ema_by_hand) {
    float ema[2] = {1.0f, -2.0f}, w[2] = {3.0f, -2.0f};
    ema_update(ema, w, 2, 0.75f);
    ck_assert_float_eq(ema[0], 1.5f);
    ck_assert_float_eq(ema[1], -2.0f);
    ema_update(ema, w, 1, 0.75f);
    ck_assert_float_eq(ema[0], 1.875f);
}
END_TEST

START_TEST(test_span_counts_its_own_steps) {
    // a span stepped twice and one stepped once differ exactly as two calls with
    // step 1, 2 and one call with step 1 do
    float p1 = 1, p2 = 1, g = 0.3f, m1 = 0, v1 = 0, m2 = 0, v2 = 0;
    AdamWSpan a = adamw_span(&p1, &g, DTYPE_FP32, &m1, &v1, NULL, 1);
    AdamWSpan b = adamw_span(&p2, &g, DTYPE_FP32, &m2, &v2, NULL, 1);
    AdamWConfig cfg = adamw_config(0.1f, 0.0f);
    adamw_step_span(&a, cfg);
    adamw_step_span(&a, cfg);
    adamw_step_span(&b, cfg);
    ck_assert_int_eq(a.step, 2);
    ck_assert_int_eq(b.step, 1);
    float q = 1, mq = 0, vq = 0;
    adamw_update(&q, &g, &mq, &vq, 1, 1, cfg);
    adamw_update(&q, &g, &mq, &vq, 1, 2, cfg);
    ck_assert_float_eq(q, p1);
}
END_TEST

START_TEST(test_sharded_update_equals_whole) {
    // updating a span in two halves is bit-identical to updating it whole
    float whole[6] = {1, 2, 3, 4, 5, 6}, parts[6] = {1, 2, 3, 4, 5, 6};
    float g[6] = {0.1f, -0.2f, 0.3f, -0.4f, 0.5f, -0.6f};
    float mw[6] = {0}, vw[6] = {0}, mp[6] = {0}, vp[6] = {0};
    AdamWConfig cfg = {.lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
    adamw_update(whole, g, mw, vw, 6, 1, cfg);
    adamw_update(parts, g, mp, vp, 4, 1, cfg);
    adamw_update(parts + 4, g + 4, mp + 4, vp + 4, 2, 1, cfg);
    for (int i = 0; i < 6; i++) ck_assert_float_eq(whole[i], parts[i]);
}
END_TEST

// The schedule's formula written out again, independently of optim.c.
static double expected_lr(int kind_cosine, double lr, double min_lr, int W, int S, int s) {
    if (s <= W) return lr * s / W;
    if (!kind_cosine) return lr;
    return min_lr + (lr - min_lr) * (1 + cos(M_PI * (s - W) / (double)(S - W))) / 2;
}

START_TEST(test_lr_schedule_points_by_hand) {
    LrSchedule cosine = {.kind = LR_COSINE, .lr = 1e-3f, .min_lr = 1e-4f, .warmup = 4, .steps = 12};
    ck_assert_float_eq_tol(lr_schedule_at(&cosine, 1), 2.5e-4f, 1e-10f);  // a quarter of the warmup
    ck_assert_float_eq(lr_schedule_at(&cosine, 4), 1e-3f);                // the warmup's end is the peak
    ck_assert_float_eq_tol(lr_schedule_at(&cosine, 8), 5.5e-4f, 1e-10f);   // halfway down: (lr + min_lr) / 2
    ck_assert_float_eq_tol(lr_schedule_at(&cosine, 6), 8.6819805e-4f, 1e-10f);  // cos(pi/4)
    ck_assert_float_eq(lr_schedule_at(&cosine, 12), 1e-4f);               // the last step: min_lr
    LrSchedule constant = {.kind = LR_CONSTANT, .lr = 1e-3f, .warmup = 2, .steps = 12};
    ck_assert_float_eq(lr_schedule_at(&constant, 1), 5e-4f);
    for (int s = 2; s <= 12; s++) ck_assert_float_eq(lr_schedule_at(&constant, s), 1e-3f);
    LrSchedule no_warmup = {.kind = LR_COSINE, .lr = 3e-4f, .min_lr = 0, .warmup = 0, .steps = 1};
    ck_assert_float_eq(lr_schedule_at(&no_warmup, 1), 0.0f);  // one step: it is the last
}
END_TEST

START_TEST(test_lr_schedule_against_the_formula) {
    int shapes[][2] = {{0, 1}, {0, 7}, {3, 3}, {5, 100}, {10, 11}, {7, 50}};  // (W, S)
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int cosine = 0; cosine < 2; cosine++) {
            LrSchedule sched = {.kind = cosine ? LR_COSINE : LR_CONSTANT, .lr = 6e-4f, .min_lr = cosine ? 6e-5f : 0,
                                .warmup = shapes[k][0], .steps = shapes[k][1]};
            float previous = 0;
            for (int s = 1; s <= sched.steps; s++) {
                double want = expected_lr(cosine, 6e-4f, cosine ? 6e-5f : 0, sched.warmup, sched.steps, s);
                float got = lr_schedule_at(&sched, s);
                ck_assert_msg(fabs(got - want) <= 1e-7 * want + 1e-12, "W=%d S=%d cosine=%d step %d: %g, not %g",
                              sched.warmup, sched.steps, cosine, s, got, want);
                if (s <= sched.warmup) ck_assert_float_gt(got, previous);  // rising during warmup
                else if (cosine && s > sched.warmup + 1) ck_assert_float_lt(got, previous);  // then falling
                previous = got;
            }
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("adamw");
    tcase_add_test(tc, test_adamw_first_step_by_hand);
    tcase_add_test(tc, test_adamw_second_step_by_hand);
    tcase_add_test(tc, test_ema_by_hand);
    tcase_add_test(tc, test_span_counts_its_own_steps);
    tcase_add_test(tc, test_sharded_update_equals_whole);
    tcase_add_test(tc, test_lr_schedule_points_by_hand);
    tcase_add_test(tc, test_lr_schedule_against_the_formula);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
