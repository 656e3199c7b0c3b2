// bench_step: how close a whole training step on the CPU comes to the machine's
// matrix-multiply rate. Prints the achieved GFLOP/s of forward + backward + AdamW
// (model FLOPs: 6 * params * tokens + attention) next to cblas_sgemm's GFLOP/s
// measured here, now, with the same threads (every core, or OMP_NUM_THREADS).
//   build/bench_step [--config d4] [--batch 4] [--seq 64] [--steps 5]
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util/cli.h"
#include "../common/util/errors.h"
#include "../common/optim.h"
#include "../common/threads.h"
#include "../common/util/timer.h"
#include "../models/gpt2.h"

static double sgemm_gflops(int n) {
    float *a = xcalloc((size_t)n * n, sizeof(float)), *b = xcalloc((size_t)n * n, sizeof(float));
    float *c = xcalloc((size_t)n * n, sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++) { a[i] = (float)(i % 7) * 0.1f; b[i] = (float)(i % 5) * 0.1f; }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);  // warm up
    int reps = 0;
    double start = timer_now(), elapsed;
    do {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        reps++;
        elapsed = timer_now() - start;
    } while (elapsed < 1.0);
    free(a); free(b); free(c);
    return 2.0 * n * n * (double)n * reps / elapsed / 1e9;
}

int main(int argc, char **argv) {
    const char *config_name = "d4";
    int B = 4, T = 64, steps = 5;
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (default d4)"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 20, "sequences per step (default 4)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 20, "sequence length (default 64)"},
        {"--steps", "S", CLI_INT, &steps, 1, 1 << 20, "timed steps after one warm-up; the best counts (default 5)"},
    };
    CliSpec spec = {.synopsis = "[--config dN] [--batch B] [--seq T] [--steps S]",
                    .about = "a CPU training step's GFLOP/s next to this machine's sgemm rate",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    threads_configure(1, NULL);  // every core of this machine (or OMP_NUM_THREADS)
    GPT2Config config;
    if (gpt2_config_preset(config_name, 0, &config) != 0) fatal("--config: unknown preset '%s'", config_name);
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, config, B, T, 0, &mem);
    const GPT2Layout *layout = &model.layout;
    size_t P = layout->num_params;
    float *params = mem_alloc_floats(&mem, MEM_PARAMS, P), *grads = mem_alloc_floats(&mem, MEM_GRADS, P);
    float *m = mem_alloc_floats(&mem, MEM_OPTIM, P), *v = mem_alloc_floats(&mem, MEM_OPTIM, P);
    for (int t = 0; t < layout->num_tensors; t++)
        gpt2_init_rows(layout, t, 1, 0, layout->tensors[t].rows, params + layout->tensors[t].offset);
    gpt2_point_into_flat(layout, params, model.params);
    gpt2_point_into_flat(layout, grads, model.grads);
    int *tokens = xmalloc((size_t)B * (T + 1) * sizeof(int));
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 7919) % config.vocab_size;
    gpt2_set_batch(&model, tokens, tokens + 1);

    double best = 1e30;
    for (int step = 0; step <= steps; step++) {  // step 0 warms up
        double start = timer_now();
        for (int u = 0; u < layout->num_units; u++) gpt2_forward_unit(&model, u);
        for (int u = layout->num_units - 1; u >= 0; u--) gpt2_backward_unit(&model, u);
        adamw_update(params, grads, m, v, P, step + 1, adamw_config(1e-4f, 0.0f));
        memset(grads, 0, P * sizeof(float));
        double elapsed = timer_now() - start;
        if (step > 0 && elapsed < best) best = elapsed;
    }
    double step_gflops = gpt2_flops_per_step(&config, B, T) / best / 1e9;
    double peak = sgemm_gflops(1024);
    printf("%s B=%d T=%d: %zu params, step %.1f ms (best of %d), %.2f GFLOP/s; "
           "sgemm 1024^3 %.2f GFLOP/s (%d threads, OpenBLAS kernels for %s); step/sgemm = %.0f%%\n",
           config_name, B, T, P, 1e3 * best, steps, step_gflops, peak, openblas_get_num_threads(),
           openblas_get_corename(), 100.0 * step_gflops / peak);
    free(tokens);
    mem_free_floats(&mem, MEM_PARAMS, params, P);
    mem_free_floats(&mem, MEM_GRADS, grads, P);
    mem_free_floats(&mem, MEM_OPTIM, m, P);
    mem_free_floats(&mem, MEM_OPTIM, v, P);
    gpt2_free(&model, &mem);
    return 0;
}
