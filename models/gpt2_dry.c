// gpt2_dry.c: the forward and backward of each unit on the dry device
// (device/device_dry.c): nothing is computed. With model->clock set (build/plan
// --time) a unit advances the virtual clock by its FLOPs (comm/sim_clock.h): backward
// by twice forward's, and blocks recomputed in backward by its forward again.
#include "comm/sim_clock.h"
#include "device/device.h"
#include "models/gpt2.h"

// Forward FLOPs of the model's unit `unit` for its B x T tokens (backward: twice
// these), as in gpt2_flops_per_step: 2 per multiply-add of the matrix products
// and attention.
static double unit_forward_flops(const GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    double C = c->channels, tokens = (double)model->B * model->T;
    if (unit == 0) return 0;  // a lookup
    if (model->layout.unit_num_layers[unit] == 0) return 2.0 * c->padded_vocab_size * C * tokens;  // the head
    return model->layout.unit_num_layers[unit] * (2.0 * 12.0 * C * C + 4.0 * model->T * C) * tokens;
}

// The planner counts the activations of either attention (plan --fused-attention).
int gpt2_device_fuses_attention(void) { return 1; }
int gpt2_device_sums_by_token(const GPT2 *model) { return (void)model, 0; }  // nothing is summed

// A bf16 run's product operands are held while the unit runs, as gpt2_cpu.c and
// gpt2_cuda.cu hold them.
void gpt2_device_forward(GPT2 *model, int unit) {
    Bf16Products bf16_run;
    const Bf16Products *products = gpt2_open_products(model, unit, 0, &bf16_run);
    if (model->clock) sim_compute(model->clock, unit_forward_flops(model, unit));
    gpt2_close_products(model, unit, 0, products);
}

void gpt2_device_backward(GPT2 *model, int unit) {
    int blocks = model->layout.unit_num_layers[unit] > 0;
    Bf16Products bf16_run;
    const Bf16Products *products = gpt2_open_products(model, unit, 1, &bf16_run);
    if (model->clock) sim_compute(model->clock, (model->recompute && blocks ? 3 : 2) * unit_forward_flops(model, unit));
    gpt2_close_products(model, unit, 1, products);
}
