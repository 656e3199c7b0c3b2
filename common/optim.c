#include "optim.h"

#include <math.h>

AdamWConfig adamw_config(float lr, float weight_decay) {
    AdamWConfig cfg = {.lr = lr, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = weight_decay};
    return cfg;
}

void adamw_update(float *params, const float *grads, float *m, float *v, size_t count, int step,
                  AdamWConfig cfg) {
    float beta1_correction = 1.0f - powf(cfg.beta1, (float)step);
    float beta2_correction = 1.0f - powf(cfg.beta2, (float)step);
#pragma omp parallel for  // element i touches only element i: any split gives the same result
    for (size_t i = 0; i < count; i++) {
        float g = grads[i];
        m[i] = cfg.beta1 * m[i] + (1.0f - cfg.beta1) * g;
        v[i] = cfg.beta2 * v[i] + (1.0f - cfg.beta2) * g * g;
        float m_hat = m[i] / beta1_correction;
        float v_hat = v[i] / beta2_correction;
        params[i] -= cfg.lr * (m_hat / (sqrtf(v_hat) + cfg.eps) + cfg.weight_decay * params[i]);
    }
}

void adamw_step_span(AdamWSpan *span, AdamWConfig cfg) {
    span->step++;
    adamw_update(span->params, span->grads, span->m, span->v, span->count, span->step, cfg);
}
