// Training a tiny model for 50 AdamW steps on a learnable sequence lowers the loss.
#include <check.h>
#include <string.h>

#include "device/optim.h"
#include "models/gpt2.h"
#include "tests/check_main.h"

START_TEST(test_fifty_steps_lower_the_loss) {
    GPT2Config c = {.max_seq_len = 16, .vocab_size = 13, .padded_vocab_size = 16, .num_layers = 2,
                    .num_heads = 2, .channels = 16};
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, c, 4, 16, 0, ATTENTION_KEEPS_PROBABILITIES, CLASSIFIER_KEEPS_PROBABILITIES, &mem);
    const GPT2Layout *l = &model.layout;
    size_t P = l->num_params;
    float *params = mem_alloc_floats(&mem, MEM_PARAMS, P), *grads = mem_alloc_floats(&mem, MEM_GRADS, P);
    float *m = mem_alloc_floats(&mem, MEM_OPTIM, P), *v = mem_alloc_floats(&mem, MEM_OPTIM, P);
    for (int t = 0; t < l->num_tensors; t++) gpt2_init_rows(l, t, 3, 0, l->tensors[t].rows, params + l->tensors[t].offset);
    gpt2_point_into_flat(l, params, model.params);
    gpt2_point_into_flat(l, grads, model.grads);
    int tokens[4 * 17];
    for (int i = 0; i < 4 * 17; i++) tokens[i] = (i * 5) % 13;  // a cycle the model can learn
    gpt2_set_batch(&model, tokens, tokens + 1);
    float first = 0, last = 0;
    for (int step = 1; step <= 50; step++) {
        for (int u = 0; u < l->num_units; u++) gpt2_forward_unit(&model, u);
        for (int u = l->num_units - 1; u >= 0; u--) gpt2_backward_unit(&model, u);
        adamw_update(params, grads, m, v, P, step, adamw_config(1e-2f, 0.0f));
        memset(grads, 0, P * sizeof(float));
        if (step == 1) first = model.mean_loss;
        last = model.mean_loss;
    }
    ck_assert_float_gt(first, 2.0f);      // about ln 13 at the start
    ck_assert_float_lt(last, 0.5f * first);
    mem_free_floats(&mem, MEM_PARAMS, params, P);
    mem_free_floats(&mem, MEM_GRADS, grads, P);
    mem_free_floats(&mem, MEM_OPTIM, m, P);
    mem_free_floats(&mem, MEM_OPTIM, v, P);
    gpt2_free(&model, &mem);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("tiny");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_fifty_steps_lower_the_loss);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
