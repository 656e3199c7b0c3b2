// optim.h: optimizers over flat float spans. A span can be a whole model, one
// tensor, or a rank's slice of a tensor: element i of the span only ever touches
// params[i], grads[i], m[i], v[i], so sharding the span shards the update exactly.
#ifndef SHARDLAB_OPTIM_H
#define SHARDLAB_OPTIM_H

#include <stddef.h>

#include "device/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float lr;
    float beta1;
    float beta2;
    float eps;
    float weight_decay;  // decoupled (AdamW): applied to the parameter, not the gradient
} AdamWConfig;

// The one place the AdamW hyperparameters are set: betas 0.9 and 0.999, eps 1e-8
// (llm.c's and PyTorch's defaults), with the run's learning rate and weight decay.
AdamWConfig adamw_config(float lr, float weight_decay);

// One AdamW update of `count` elements. `step` is the 1-based number of updates
// this span has received, including this one (it drives the bias correction).
void adamw_update(float *params, const float *grads, float *m, float *v, size_t count, int step,
                  AdamWConfig cfg);

// A span with its own AdamW state and step count (one per tensor, or per slice
// of a tensor that a rank owns).
// In a --precision bf16 run (docs/precision.md) params is the fp32 master copy
// and `working` the bf16 copy the model reads, rounded from it after each update;
// with --reduce-dtype bf16 the gradients come as grads_bf16 instead of grads.
typedef struct {
    float *params, *grads, *m, *v;  // (count) each; grads NULL when grads_bf16 holds them
    size_t count;
    int step;                       // updates applied so far
    const bf16 *grads_bf16;         // NULL, or (count) the gradients, in place of grads
    bf16 *working;                  // NULL, or (count) where the updated params go, rounded
} AdamWSpan;

// A span over its buffers: gradients of grad_dtype; working NULL unless the
// params are a bf16 run's master.
AdamWSpan adamw_span(float *params, void *grads, DType grad_dtype, float *m, float *v, bf16 *working, size_t count);

// Counts the step and applies it.
void adamw_step_span(AdamWSpan *span, AdamWConfig cfg);

// --ema DECAY: after each update, the exponential moving average of the weights
// moves toward them: ema = decay * ema + (1 - decay) * params, element by element
// (so, like AdamW, it shards with its span).
void ema_update(float *ema, const float *params, size_t count, float decay);

// The learning rate over a run of `steps` steps.
typedef enum { LR_CONSTANT, LR_COSINE } LrScheduleKind;

typedef struct {
    LrScheduleKind kind;
    float lr;      // the peak: reached at the end of the warmup
    float min_lr;  // cosine: the rate at the last step
    int warmup;    // steps of linear warmup from 0
    int steps;     // the last step
} LrSchedule;

// The rate of step `step` (1-based, as logged); see optim.c for the formula.
float lr_schedule_at(const LrSchedule *schedule, int step);

#ifdef __cplusplus
}
#endif

#endif
