// bench_gpu: the GPU path's speed on this GPU, measured against this GPU.
//   1. the peak matrix-multiply rate cuBLAS reaches here (8192^3), in bf16
//      (fp32 accumulate) and in fp32 with TF32 tensor cores;
//   2. one rank training GPT-2 (--precision fp32: TF32 products; bf16: bf16
//      operands, an fp32 master and AdamW state, as train_single keeps them):
//      tokens/s, MFU = model FLOPs per second / each measured peak and / the
//      datasheet's dense bf16 peak (--peak-tflops), the peak memory;
//   3. one more step with each op timed (models/gpt2.h's op_times): where the
//      step's time goes;
//   4. with --offload-optimizer, the step with the optimizer in pinned host
//      memory (kit/resident.h), each unit's update begun after its backward
//      as train_single's is, and the host link's latency and bandwidth
//      fitted to pinned copies both ways, for build/plan --time --host-link.
//   build/cuda/bench_gpu [--config d12] [--batch 16] [--seq 1024] [--steps 10] [--precision fp32|bf16]
//                        [--fused-attention] [--fused-classifier] [--offload-optimizer] [--peak-tflops X]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "device/cuda_check.h"
#include "device/device.h"
#include "device/device_cuda.h"
extern "C" {  // C headers without a C++ guard
#include "run/passes.h"
#include "kit/resident.h"
#include "comm/sim_clock.h"
}
#include "models/gpt2.h"

// Values in [-1, 1) from a hash of the index: tensor cores run faster on zeros,
// so a peak measured on zeroed matrices would flatter it.
__global__ static void fill_kernel(void *out, int is_bf16, size_t count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    unsigned int h = (unsigned int)(i * 2654435761u) ^ (unsigned int)(i >> 13);
    float value = (float)(h % 2048u) / 1024.0f - 1.0f;
    if (is_bf16) ((__nv_bfloat16 *)out)[i] = __float2bfloat16(value);
    else ((float *)out)[i] = value;
}

static double time_gemms(cudaDataType_t type, cublasComputeType_t compute, int n, int reps) {
    size_t bytes = (size_t)n * n * (type == CUDA_R_16BF ? 2 : 4);
    void *a, *b, *c;
    CUDA_CHECK(cudaMalloc(&a, bytes));
    CUDA_CHECK(cudaMalloc(&b, bytes));
    CUDA_CHECK(cudaMalloc(&c, (size_t)n * n * 4));
    size_t count = (size_t)n * n;
    fill_kernel<<<device_blocks(count, 256), 256>>>(a, type == CUDA_R_16BF, count);
    CUDA_CHECK_LAUNCH();
    fill_kernel<<<device_blocks(count, 256), 256>>>(b, type == CUDA_R_16BF, count);
    CUDA_CHECK_LAUNCH();
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i <= reps; i++) {
        if (i == 1) CUDA_CHECK(cudaEventRecord(start, 0));  // the first call warms up
        CUBLAS_CHECK(cublasGemmEx(device_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, type, n, b, type, n,
                                  &zero, c, CUDA_R_32F, n, compute, CUBLAS_GEMM_DEFAULT));
    }
    CUDA_CHECK(cudaEventRecord(stop, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaFree(a));
    CUDA_CHECK(cudaFree(b));
    CUDA_CHECK(cudaFree(c));
    return 2.0 * n * (double)n * n * reps / (ms / 1e3) / 1e12;
}

// Pinned host to device and back, 4 KB to 256 MB, each size's best of 5: one
// copy is one hop of a chain between two "ranks" (alpha + bytes / beta), fitted
// as comm/sim_clock.h fits a link.
static Link host_link(void) {
    enum { SIZES = 17, REPS = 5 };
    size_t most = (size_t)1 << 28;
    void *host, *dev;
    CUDA_CHECK(cudaMallocHost(&host, most));
    CUDA_CHECK(cudaMalloc(&dev, most));
    memset(host, 1, most);
    CommOp op[2 * SIZES];
    int ranks[2 * SIZES];
    double bytes[2 * SIZES], seconds[2 * SIZES];
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < 2 * SIZES; i++) {
        size_t size = (size_t)4096 << (i / 2);
        int down = i % 2;  // device to host, as the gradients go; else the parameters' way up
        double best = 1e30;
        for (int r = 0; r < REPS; r++) {
            CUDA_CHECK(cudaEventRecord(start, 0));
            CUDA_CHECK(cudaMemcpy(down ? host : dev, down ? dev : host, size, cudaMemcpyDefault));
            CUDA_CHECK(cudaEventRecord(stop, 0));
            CUDA_CHECK(cudaEventSynchronize(stop));
            float ms;
            CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            if (ms / 1e3 < best) best = ms / 1e3;
        }
        op[i] = COMM_BROADCAST, ranks[i] = 2, bytes[i] = (double)size, seconds[i] = best;
    }
    CUDA_CHECK(cudaFreeHost(host));
    CUDA_CHECK(cudaFree(dev));
    Link link = {0, 0};
    if (fit_link(op, ranks, bytes, seconds, 2 * SIZES, &link) != 0) fatal("host link: the copies fit no line");
    return link;
}

int main(int argc, char **argv) {
    const char *config_name = "d12", *precision = "fp32";
    int B = 16, T = 1024, steps = 10, fused_attention = 0, fused_classifier = 0, offload = 0;
    float datasheet_tflops = 989.4f;  // H100 SXM and H200: dense bf16 with fp32 accumulation
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (default d12)"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 20, "sequences per step (default 16)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 20, "sequence length (default 1024)"},
        {"--steps", "S", CLI_INT, &steps, 1, 1 << 20, "timed steps (default 10)"},
        {"--precision", "fp32|bf16", CLI_STRING, &precision, 0, 0,
         "what the model keeps and multiplies (default fp32)"},
        {"--fused-attention", NULL, CLI_SWITCH, &fused_attention, 0, 0,
         "the trainers' --fused-attention: one pass over the keys, no (T, T) probabilities"},
        {"--fused-classifier", NULL, CLI_SWITCH, &fused_classifier, 0, 0,
         "the trainers' --fused-classifier: the loss's gradient in the forward, no (B, T, Vp) probabilities"},
        {"--offload-optimizer", NULL, CLI_SWITCH, &offload, 0, 0,
         "the trainers' --offload-optimizer: master and AdamW moments in pinned host memory, AdamW on the CPU; "
         "and the host link fitted to pinned copies"},
        {"--peak-tflops", "X", CLI_FLOAT, &datasheet_tflops, 1, 1e6,
         "the GPU's datasheet dense bf16 TFLOP/s for MFU (default 989.4, H100 SXM and H200)"},
    };
    // positional: nvcc's C++17 has no designated initializers
    CliSpec spec = {"[--config dN] [--batch B] [--seq T] [--steps S] [--precision fp32|bf16] [--fused-attention] "
                    "[--fused-classifier] [--offload-optimizer] [--peak-tflops X]",
                    "peak cuBLAS rates on this GPU, and one rank training GPT-2 against them (MFU)",
                    options, (int)(sizeof options / sizeof options[0]), NULL, 0, NULL};
    cli_parse_or_exit(&spec, argc, argv);
    DType dtype;
    if (strcmp(precision, "fp32") == 0) dtype = DTYPE_FP32;
    else if (strcmp(precision, "bf16") == 0) dtype = DTYPE_BF16;
    else fatal("--precision: '%s' is neither fp32 nor bf16", precision);
    device_init(0);
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    double bf16_peak = time_gemms(CUDA_R_16BF, CUBLAS_COMPUTE_32F, 8192, 20);
    double tf32_peak = time_gemms(CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, 8192, 20);
    printf("%s: cuBLAS 8192^3: bf16 %.1f TFLOP/s, tf32 %.1f TFLOP/s\n", prop.name, bf16_peak, tf32_peak);

    GPT2Config config;
    if (gpt2_config_preset(config_name, 0, &config) != 0) fatal("--config: unknown preset '%s'", config_name);
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, config, B, T, 0, fused_attention ? ATTENTION_KEEPS_LOGSUMEXP : ATTENTION_KEEPS_PROBABILITIES,
              fused_classifier ? CLASSIFIER_FUSED : CLASSIFIER_KEEPS_PROBABILITIES, &mem);
    model.param_dtype = model.grad_dtype = dtype;
    RunSettings settings = {.offload_optimizer = offload};
    StrategyContext ctx = {.model = &model, .mem = &mem, .run = &settings};  // what resident_init reads
    const GPT2Layout *layout = &model.layout;
    // every tensor whole, kept as train_single keeps it (single/single.c)
    Resident resident;
    size_t *count = (size_t *)xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = layout->tensors[t].numel;
    resident_init(&resident, &ctx, count);
    free(count);
    ParamSource source = {NULL, 1, 0};
    for (int t = 0; t < layout->num_tensors; t++) {
        resident_load_rows(&resident, layout, &source, t, 0, layout->tensors[t].rows);
        model.params[t] = resident_params(&resident, t);
        model.grads[t] = resident_grads(&resident, t);
    }
    int *tokens = (int *)xmalloc((size_t)B * (T + 1) * sizeof(int));
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 7919) % config.vocab_size;
    int *targets = (int *)xmalloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) targets[b * T + t] = tokens[b * (T + 1) + t + 1];
    gpt2_set_batch(&model, tokens, targets);

    cudaEvent_t start, stop, adamw_start;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventCreate(&adamw_start));
    OffloadEarly early = {.config = adamw_config(1e-4f, 0.0f)};
    GPT2OpTimes ops;
    GPT2StepTimes profile = {0, 0, 0};
    float ms_total = 0;
    double early_s = 0;  // the host's seconds on offloaded updates inside the timed steps' backward
    for (int step = 0; step <= steps + 1; step++) {  // step 0 warms up; the last is timed op by op
        int profiled = step == steps + 1;
        memset(&ops, 0, sizeof ops);
        model.op_times = profiled ? &ops : NULL;
        CUDA_CHECK(cudaEventRecord(start, 0));
        for (int u = 0; u < layout->num_units; u++) gpt2_forward_unit(&model, u);
        early.host_s = 0;
        offload_early_begin(&settings, 0, &early);  // offloaded, each unit's update begins after its backward
        for (int u = layout->num_units - 1; u >= 0; u--) {
            gpt2_backward_unit(&model, u);
            resident_unit_final(&resident, u);  // as train_single's (single/single.c)
        }
        CUDA_CHECK(cudaEventRecord(adamw_start, 0));
        resident_step(&resident, layout->num_tensors, early.config);  // AdamW (what is left), the gradients zeroed
        settings.offload_early = NULL;
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms, adamw_ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        CUDA_CHECK(cudaEventElapsedTime(&adamw_ms, adamw_start, stop));
        if (step > 0 && !profiled) {
            ms_total += ms;
            early_s += early.host_s;
        }
        if (profiled) profile = {adamw_ms / 1e3, 0, ms / 1e3};
    }
    double step_s = ms_total / 1e3 / steps, flops = gpt2_flops_per_step(&config, B, T), rate = flops / step_s / 1e12;
    printf("%s B=%d T=%d, --precision %s%s%s%s: %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s model; MFU %.1f%% of the "
           "datasheet's dense bf16 %.1f, %.1f%% of cuBLAS's bf16, %.1f%% of cuBLAS's tf32; peak %.2f GB "
           "(reserved %.2f GB; host %.2f GB)\n",
           config_name, B, T, precision, fused_attention ? " --fused-attention" : "",
           fused_classifier ? " --fused-classifier" : "", offload ? " --offload-optimizer" : "", 1e3 * step_s, B * T / step_s, rate, 100 * rate / datasheet_tflops,
           datasheet_tflops, 100 * rate / bf16_peak, 100 * rate / tf32_peak, mem.total_peak / 1e9,
           device_reserved(&mem).peak / 1e9, mem.host_peak / 1e9);
    printf("one more step, each op timed on its own (AdamW with the zeroing of the gradients):\n");
    gpt2_print_op_times(&ops, &profile);
    if (offload) {
        Link link = host_link();
        printf("offloaded updates begun in the backward: %.1f ms of host time per step\n", 1e3 * early_s / steps);
        printf("host link, pinned copies both ways: %.3g s + bytes / %.1f GB/s (build/plan --time --offload-optimizer "
               "--host-link %.3g,%.1f)\n", link.alpha, link.beta / 1e9, link.alpha, link.beta / 1e9);
    }
    return 0;
}
