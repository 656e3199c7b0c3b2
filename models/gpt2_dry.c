// gpt2_dry.c: the forward and backward of each unit on the dry device
// (common/device_dry.c): nothing is computed. With model->clock set (build/plan
// --time) a unit advances the virtual clock by its FLOPs (step_time.h): backward
// by twice forward's, and blocks recomputed in backward by its forward again.
#include "../common/step_time.h"
#include "gpt2.h"

// The planner counts the activations of either attention (plan --fused-attention).
int gpt2_device_fuses_attention(void) { return 1; }

void gpt2_device_forward(GPT2 *model, int unit) {
    if (model->clock) sim_compute(model->clock, unit_forward_flops(model, unit));
}

void gpt2_device_backward(GPT2 *model, int unit) {
    int blocks = model->layout.unit_num_layers[unit] > 0;
    if (model->clock) sim_compute(model->clock, (model->recompute && blocks ? 3 : 2) * unit_forward_flops(model, unit));
}
