// llmc_check: checks shardlab's GPT-2 against a reference. Loads an llm.c model
// and debug state (inputs, targets, expected logits, loss and gradients), runs
// one forward and backward, and prints the largest difference per tensor.
//   build/llmc_check MODEL.bin DEBUG_STATE.bin
// Exits 1 when any element differs by more than 1e-4 + 1e-3 * |expected|.
// The CUDA build (build/cuda/llmc_check) runs the same check on the GPU.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "device/device.h"
#include "util/errors.h"
#include "models/gpt2.h"
#include "models/gpt2_io.h"

static const double ABS_TOL = 1e-4, REL_TOL = 1e-3;

// Largest |got - want| over n elements; counts elements outside the tolerance.
static double compare(const float *got, const float *want, size_t n, size_t stride_got,
                      size_t stride_want, size_t row_len, size_t *bad) {
    double max_diff = 0;
    for (size_t i = 0; i < n; i++) {
        size_t row = i / row_len, col = i % row_len;
        double g = got[row * stride_got + col], w = want[row * stride_want + col];
        double diff = fabs(g - w);
        if (!(diff <= ABS_TOL + REL_TOL * fabs(w))) (*bad)++;  // NaN counts as bad
        if (diff > max_diff || isnan(diff)) max_diff = diff;
    }
    return max_diff;
}

int main(int argc, char **argv) {
    const char *paths[2];
    int num_paths = 0;
    CliSpec spec = {.synopsis = "MODEL.bin DEBUG_STATE.bin",
                    .about = "one forward and backward of an llm.c model against a debug state's logits, loss and "
                             "gradients; exits 1 on a difference",
                    .positional = paths, .max_positional = 2, .num_positional = &num_paths};
    cli_parse_or_exit(&spec, argc, argv);
    if (num_paths != 2) fatal("give MODEL.bin and DEBUG_STATE.bin (%s --help)", argv[0]);
    const char *model_path = paths[0];
    GPT2Config config;
    gpt2_checkpoint_read_config(model_path, &config);
    GPT2Layout layout;
    gpt2_layout_init(&layout, config);
    GPT2DebugState state;
    gpt2_debug_state_read(paths[1], &layout, &state);

    device_init(0);
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, config, state.B, state.T, 0, ATTENTION_KEEPS_PROBABILITIES, CLASSIFIER_KEEPS_PROBABILITIES, &mem);
    float *params = device_alloc(&mem, MEM_PARAMS, layout.num_params);
    float *grads = device_alloc(&mem, MEM_GRADS, layout.num_params);
    float *host = xmalloc(layout.num_params * sizeof(float));
    for (int t = 0; t < layout.num_tensors; t++)
        gpt2_checkpoint_read_rows(model_path, &layout, t, 0, layout.tensors[t].rows, host + layout.tensors[t].offset);
    device_from_host(params, host, layout.num_params);
    gpt2_point_into_flat(&layout, params, model.params);
    gpt2_point_into_flat(&layout, grads, model.grads);

    gpt2_set_batch(&model, state.inputs, state.targets);
    for (int u = 0; u < layout.num_units; u++) gpt2_forward_unit(&model, u);
    int V = config.vocab_size, Vp = config.padded_vocab_size;
    size_t bad = 0, total_bad = 0;
    float *logits = xmalloc((size_t)state.B * state.T * Vp * sizeof(float));
    device_to_host(logits, model.acts.logits, (size_t)state.B * state.T * Vp);
    double d = compare(logits, state.logits, (size_t)state.B * state.T * V, Vp, V, V, &bad);
    free(logits);
    printf("%-10s max abs diff %.3e %s\n", "logits", d, bad ? "FAIL" : "ok");
    total_bad += bad;
    bad = 0;
    d = compare(&model.mean_loss, &state.loss, 1, 1, 1, 1, &bad);
    printf("%-10s %.6f vs %.6f, diff %.3e %s\n", "loss", model.mean_loss, state.loss, d, bad ? "FAIL" : "ok");
    total_bad += bad;

    for (int u = layout.num_units - 1; u >= 0; u--) gpt2_backward_unit(&model, u);
    device_to_host(host, grads, layout.num_params);
    // one line per llm.c tensor (per-layer tensors sit side by side in the file)
    for (int t = 0; t < layout.num_tensors; t++) {
        const GPT2Tensor *first = &layout.tensors[t];
        if (first->layer > 0) continue;
        size_t count = first->layer == 0 ? first->numel * (size_t)config.num_layers : first->numel;
        const char *name = first->layer == 0 ? strchr(first->name, '.') + 1 : first->name;
        bad = 0;
        d = compare(host + first->offset, state.grads + first->offset, count, 0, 0, count, &bad);
        printf("d%-9s max abs diff %.3e %s\n", name, d, bad ? "FAIL" : "ok");
        total_bad += bad;
    }
    free(host);
    device_free(&mem, MEM_PARAMS, params, layout.num_params);
    device_free(&mem, MEM_GRADS, grads, layout.num_params);
    gpt2_free(&model, &mem);
    gpt2_debug_state_free(&state);
    gpt2_layout_free(&layout);
    if (total_bad) {
        printf("FAIL: %zu values outside %.0e + %.0e * |expected|\n", total_bad, ABS_TOL, REL_TOL);
        return 1;
    }
    printf("OK: logits, loss and all gradients match\n");
    return 0;
}
