#include "device/optim.h"

#include <math.h>

AdamWConfig adamw_config(float lr, float weight_decay) {
    AdamWConfig cfg = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = weight_decay};
    return cfg;
}

// One element's update; the bias corrections are 1 - beta^step.
static inline void adamw_element(float *param, float grad, float *m, float *v, AdamWConfig cfg,
                                 float beta1_correction, float beta2_correction) {
    *m = cfg.beta1 * *m + (1.0f - cfg.beta1) * grad;
    *v = cfg.beta2 * *v + (1.0f - cfg.beta2) * grad * grad;
    float m_hat = *m / beta1_correction;
    float v_hat = *v / beta2_correction;
    *param -= cfg.lr * (m_hat / (sqrtf(v_hat) + cfg.eps) + cfg.weight_decay * *param);
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t count, int step,
                  AdamWConfig cfg) {
    float beta1_correction = 1.0f - powf(cfg.beta1, (float)step);
    float beta2_correction = 1.0f - powf(cfg.beta2, (float)step);
    // element i touches only element i: any split over threads and vector lanes gives the same result
#pragma omp parallel for simd
    for (size_t i = 0; i < count; i++)  // vectorised
        adamw_element(&params[i], grads[i], &m[i], &v[i], cfg, beta1_correction, beta2_correction);
}

AdamWSpan adamw_span(float *params, void *grads, DType grad_dtype, float *m, float *v, bf16 *working, size_t count) {
    AdamWSpan span = {.params = params, .m = m, .v = v, .count = count, .working = working};
    if (grad_dtype == DTYPE_BF16) span.grads_bf16 = grads;
    else span.grads = grads;
    return span;
}

void ema_update(float *ema, const float *params, size_t count, float decay) {
    for (size_t i = 0; i < count; i++) ema[i] = decay * ema[i] + (1.0f - decay) * params[i];
}

// A bf16 run's span writes each element's working copy in the same pass, while
// its new master value is at hand (a second pass would read every master again).
// Each case its own loop: a branch inside one would keep it from vectorising.
void adamw_step_span(AdamWSpan *span, AdamWConfig cfg) {
    span->step++;
    if (!span->working && !span->grads_bf16) {
        adamw_update(span->params, span->grads, span->m, span->v, span->count, span->step, cfg);
        return;
    }
    float beta1_correction = 1.0f - powf(cfg.beta1, (float)span->step);
    float beta2_correction = 1.0f - powf(cfg.beta2, (float)span->step);
    float *p = span->params, *m = span->m, *v = span->v;
    const float *g = span->grads;
    const bf16 *g16 = span->grads_bf16;
    bf16 *working = span->working;
    if (!working) {
#pragma omp parallel for simd
        for (size_t i = 0; i < span->count; i++)  // vectorised
            adamw_element(&p[i], bf16_to_float(g16[i]), &m[i], &v[i], cfg, beta1_correction, beta2_correction);
    } else if (g16) {
#pragma omp parallel for simd
        for (size_t i = 0; i < span->count; i++) {  // vectorised
            adamw_element(&p[i], bf16_to_float(g16[i]), &m[i], &v[i], cfg, beta1_correction, beta2_correction);
            working[i] = bf16_from_float(p[i]);
        }
    } else {
#pragma omp parallel for simd
        for (size_t i = 0; i < span->count; i++) {  // vectorised
            adamw_element(&p[i], g[i], &m[i], &v[i], cfg, beta1_correction, beta2_correction);
            working[i] = bf16_from_float(p[i]);
        }
    }
}

// Step s of E (1-based, E = --steps), peak rate lr, warmup W, final rate min_lr:
//   s <= W            lr * s / W                  linear from 0: step W reaches lr
//   s > W, constant   lr
//   s > W, cosine     min_lr + (lr - min_lr) * (1 + cos(pi * (s - W) / (E - W))) / 2
// so the cosine starts at lr right after the warmup and reaches min_lr at the
// last step. Worked out in double, rounded once to float.
float lr_schedule_at(const LrSchedule *schedule, int step) {
    double lr = schedule->lr, min_lr = schedule->min_lr;
    int W = schedule->warmup, E = schedule->steps;
    if (step <= W) return (float)(lr * step / W);
    if (schedule->kind == LR_CONSTANT) return (float)lr;
    double progress = (double)(step - W) / (E - W);
    return (float)(min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress)));
}

