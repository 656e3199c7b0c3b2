// bench_step: how close a whole training step on the CPU comes to the machine's
// matrix-multiply rate, and where the step's time goes. Prints the achieved
// GFLOP/s of forward + backward + AdamW (model FLOPs: 6 * params * tokens +
// attention) next to the products' engine's GFLOP/s (`product`: the engine
// models/products.c chooses for this CPU) on a 1024^3 product measured between the steps, with the
// same threads (every core, or OMP_NUM_THREADS), then the best step's time per op
// kind: forward and backward milliseconds and the share of the step, timed
// through the model's op_times table (models/gpt2.h) in the same steps. With
// --precision bf16 the step is a bf16 run's (docs/precision.md): bf16 parameters
// and gradients, fp32 master, products on bf16 operands (product_bf16), and the
// rate beside it the engine's on a 1024^3 product of bf16 operands.
//   build/bench_step [--config d4] [--batch 4] [--seq 64] [--steps 5] [--precision bf16]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "util/errors.h"
#include "device/device.h"
#include "device/dtype.h"
#include "device/optim.h"
#include "run/threads.h"
#include "util/timer.h"
#include "models/gpt2.h"
#include "models/gpt2_ops.h"

// The n^3 sgemm the step is compared with. It runs for half a second after each
// step, so that on a shared machine both sides see the same load, and the best
// of these rates counts, as the best step does.
typedef struct {
    int n;
    float *a, *b, *c;  // (n,n) each
    bf16 *a16, *b16;   // NULL, or a and b rounded: the product runs on bf16 operands
} Sgemm;

#define SGEMM_SECONDS_PER_STEP 0.5

static Sgemm sgemm_init(int n, int bf16_operands) {
    Sgemm g = {.n = n, .a = xcalloc((size_t)n * n, sizeof(float)), .b = xcalloc((size_t)n * n, sizeof(float)),
               .c = xcalloc((size_t)n * n, sizeof(float))};
    for (size_t i = 0; i < (size_t)n * n; i++) { g.a[i] = (float)(i % 7) * 0.1f; g.b[i] = (float)(i % 5) * 0.1f; }
    if (bf16_operands) {
        g.a16 = xmalloc((size_t)n * n * sizeof(bf16)), g.b16 = xmalloc((size_t)n * n * sizeof(bf16));
        device_round(g.a16, g.a, (size_t)n * n);
        device_round(g.b16, g.b, (size_t)n * n);
    }
    return g;
}

// GFLOP/s of back-to-back calls over at least `seconds`.
static double sgemm_gflops(const Sgemm *g, double seconds) {
    int calls = 0;
    double start = timer_now(), elapsed;
    do {
        if (g->a16) product_bf16('N', 'T', g->n, g->n, g->n, g->a16, g->n, g->b16, g->n, 0, g->c, DTYPE_FP32, g->n);
        else product('N', 'T', g->n, g->n, g->n, 1, g->a, g->n, g->b, g->n, 0, g->c, g->n);
        calls++;
        elapsed = timer_now() - start;
    } while (elapsed < seconds);
    return 2.0 * g->n * g->n * (double)g->n * calls / elapsed / 1e9;
}

static void sgemm_free(Sgemm *g) {
    free(g->a);
    free(g->b);
    free(g->c);
    free(g->a16);
    free(g->b16);
}

int main(int argc, char **argv) {
    const char *config_name = "d4";
    int B = 4, T = 64, steps = 5, fused_classifier = 0;
    const char *precision = "fp32";
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (default d4)"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 20, "sequences per step (default 4)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 20, "sequence length (default 64)"},
        {"--steps", "S", CLI_INT, &steps, 1, 1 << 20, "timed steps after one warm-up; the best counts (default 5)"},
        {"--fused-classifier", NULL, CLI_SWITCH, &fused_classifier, 0, 0,
         "softmax, cross-entropy and its gradient in the forward's one pass, as train_* --fused-classifier"},
        {"--precision", "fp32|bf16", CLI_STRING, &precision, 0, 0,
         "a bf16 run's step (bf16 parameters, gradients and product operands) against bf16 products' rate"},
    };
    CliSpec spec = {.synopsis = "[--config dN] [--batch B] [--seq T] [--steps S] [--fused-classifier] "
                                "[--precision fp32|bf16]",
                    .about = "a CPU training step's GFLOP/s next to this machine's sgemm rate",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    threads_configure(1, NULL);  // every core of this machine (or OMP_NUM_THREADS)
    GPT2Config config;
    if (gpt2_config_preset(config_name, 0, &config) != 0) fatal("--config: unknown preset '%s'", config_name);
    DType dtype;
    if (dtype_parse(precision, &dtype) != 0) fatal("--precision: give fp32 or bf16, not '%s'", precision);
    int bf16_run = dtype == DTYPE_BF16;
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, config, B, T, 0, ATTENTION_KEEPS_PROBABILITIES,
              fused_classifier ? CLASSIFIER_FUSED : CLASSIFIER_KEEPS_PROBABILITIES, &mem);
    const GPT2Layout *layout = &model.layout;
    size_t P = layout->num_params;
    // params: the fp32 master in a bf16 run, whose model reads the rounded working copy and writes bf16 gradients
    float *params = mem_alloc_floats(&mem, MEM_PARAMS, P), *grads = mem_alloc_floats(&mem, MEM_GRADS, P);
    float *m = mem_alloc_floats(&mem, MEM_OPTIM, P), *v = mem_alloc_floats(&mem, MEM_OPTIM, P);
    bf16 *working = bf16_run ? xmalloc(P * sizeof(bf16)) : NULL, *grads16 = bf16_run ? xcalloc(P, sizeof(bf16)) : NULL;
    for (int t = 0; t < layout->num_tensors; t++)
        gpt2_init_rows(layout, t, 1, 0, layout->tensors[t].rows, params + layout->tensors[t].offset);
    gpt2_point_into_flat(layout, params, model.params);
    gpt2_point_into_flat(layout, grads, model.grads);
    if (bf16_run) {
        device_round(working, params, P);
        model.param_dtype = model.grad_dtype = DTYPE_BF16;
        for (int t = 0; t < layout->num_tensors; t++) {
            model.params[t] = working + layout->tensors[t].offset;
            model.grads[t] = grads16 + layout->tensors[t].offset;
        }
    }
    AdamWSpan update = adamw_span(params, bf16_run ? (void *)grads16 : grads, dtype, m, v, working, P);
    int *tokens = xmalloc((size_t)B * (T + 1) * sizeof(int));
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 7919) % config.vocab_size;
    gpt2_set_batch(&model, tokens, tokens + 1);

    GPT2OpTimes ops, best_ops = {0};
    GPT2StepTimes best = {.step_s = 1e30};
    model.op_times = &ops;
    Sgemm sgemm = sgemm_init(1024, bf16_run);
    double sgemm_best = 0;  // GFLOP/s
    for (int step = 0; step <= steps; step++) {  // step 0 warms up
        memset(&ops, 0, sizeof ops);
        double start = timer_now();
        for (int u = 0; u < layout->num_units; u++) gpt2_forward_unit(&model, u);
        for (int u = layout->num_units - 1; u >= 0; u--) gpt2_backward_unit(&model, u);
        double adamw_start = timer_now();
        adamw_step_span(&update, adamw_config(1e-4f, 0.0f));
        double zero_start = timer_now();
        if (bf16_run) device_zero_as(grads16, P, DTYPE_BF16);  // as the trainers zero them
        else device_zero(grads, P);
        double end = timer_now();
        if (step > 0 && end - start < best.step_s) {
            best = (GPT2StepTimes){.adamw_s = zero_start - adamw_start, .zero_grads_s = end - zero_start,
                               .step_s = end - start};
            best_ops = ops;
        }
        double sgemm_rate = sgemm_gflops(&sgemm, SGEMM_SECONDS_PER_STEP);
        if (step > 0 && sgemm_rate > sgemm_best) sgemm_best = sgemm_rate;
    }
    double step_gflops = gpt2_flops_per_step(&config, B, T) / best.step_s / 1e9;
    ProductEngine engine = product_engine();
    printf("%s B=%d T=%d%s %s: %zu params, step %.1f ms (best of %d), %.2f GFLOP/s; %s 1024^3 %.2f GFLOP/s "
           "(the best of %.1f s runs after each step; %d threads); step/%s = %.0f%%\n",
           config_name, B, T, fused_classifier ? " (fused classifier)" : "", precision, P, 1e3 * best.step_s, steps,
           step_gflops, bf16_run ? "bf16 product" : "sgemm", sgemm_best, SGEMM_SECONDS_PER_STEP,
           omp_get_max_threads(), bf16_run ? "product" : "sgemm", 100.0 * step_gflops / sgemm_best);
    printf("products: %s (%s kernels; oneDNN's instruction set here %s; chosen by %s; threads by %s); "
           "bf16 operands: %s\n",
           engine.engine, engine.kernels, engine.isa, engine.chosen_by, engine.parallel, engine.bf16_kernels);
    DType operands = bf16_run ? DTYPE_BF16 : DTYPE_FP32;
    printf("routes: forward out = inp weight^T: %s; backward dinp = dout weight: %s; dweight += dout^T inp: %s\n",
           product_route('N', 'T', operands), product_route('N', 'N', operands), product_route('T', 'N', operands));
    gpt2_print_op_times(&best_ops, &best);
    sgemm_free(&sgemm);
    free(tokens);
    mem_free_floats(&mem, MEM_PARAMS, params, P);
    mem_free_floats(&mem, MEM_GRADS, grads, P);
    mem_free_floats(&mem, MEM_OPTIM, m, P);
    mem_free_floats(&mem, MEM_OPTIM, v, P);
    free(working);
    free(grads16);
    gpt2_free(&model, &mem);
    return 0;
}
