// bench_gpu: the GPU path's speed on this GPU, measured against this GPU.
//   1. the peak matrix-multiply rate cuBLAS reaches here (8192^3), in bf16
//      (fp32 accumulate) and in fp32 with TF32 tensor cores;
//   2. one rank training GPT-2 (fp32 parameters, TF32 products): tokens/s and
//      MFU = model FLOPs per second / each measured peak.
//   build/cuda/bench_gpu [--config d12] [--batch 16] [--seq 1024] [--steps 10]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util/cli.h"
#include "../common/cuda_check.h"
#include "../common/device.h"
#include "../common/device_cuda.h"
#include "../models/gpt2.h"

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

int main(int argc, char **argv) {
    const char *config_name = "d12";
    int B = 16, T = 1024, steps = 10;
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (default d12)"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 20, "sequences per step (default 16)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 20, "sequence length (default 1024)"},
        {"--steps", "S", CLI_INT, &steps, 1, 1 << 20, "timed steps (default 10)"},
    };
    // positional: nvcc's C++17 has no designated initializers
    CliSpec spec = {"[--config dN] [--batch B] [--seq T] [--steps S]",
                    "peak cuBLAS rates on this GPU, and one rank training GPT-2 against them (MFU)",
                    options, (int)(sizeof options / sizeof options[0]), NULL, 0, NULL};
    cli_parse_or_exit(&spec, argc, argv);
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
    gpt2_init(&model, config, B, T, 0, &mem);
    const GPT2Layout *layout = &model.layout;
    size_t P = layout->num_params;
    float *params = device_alloc(&mem, MEM_PARAMS, P), *grads = device_alloc(&mem, MEM_GRADS, P);
    AdamWSpan span = adamw_span(params, grads, DTYPE_FP32, device_alloc(&mem, MEM_OPTIM, P),
                                device_alloc(&mem, MEM_OPTIM, P), NULL, P);
    float *host = (float *)xmalloc(P * sizeof(float));
    for (int t = 0; t < layout->num_tensors; t++)
        gpt2_init_rows(layout, t, 1, 0, layout->tensors[t].rows, host + layout->tensors[t].offset);
    device_from_host(params, host, P);
    free(host);
    gpt2_point_into_flat(layout, params, model.params);
    gpt2_point_into_flat(layout, grads, model.grads);
    int *tokens = (int *)xmalloc((size_t)B * (T + 1) * sizeof(int));
    for (int i = 0; i < B * (T + 1); i++) tokens[i] = (i * 7919) % config.vocab_size;
    int *targets = (int *)xmalloc((size_t)B * T * sizeof(int));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) targets[b * T + t] = tokens[b * (T + 1) + t + 1];
    gpt2_set_batch(&model, tokens, targets);

    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    AdamWConfig adamw = adamw_config(1e-4f, 0.0f);
    float ms_total = 0;
    for (int step = 0; step <= steps; step++) {  // step 0 warms up
        CUDA_CHECK(cudaEventRecord(start, 0));
        for (int u = 0; u < layout->num_units; u++) gpt2_forward_unit(&model, u);
        for (int u = layout->num_units - 1; u >= 0; u--) gpt2_backward_unit(&model, u);
        device_adamw(&span, adamw);
        device_zero(grads, P);
        CUDA_CHECK(cudaEventRecord(stop, 0));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (step > 0) ms_total += ms;
    }
    double step_s = ms_total / 1e3 / steps, flops = gpt2_flops_per_step(&config, B, T);
    printf("%s B=%d T=%d, fp32 parameters, tf32 products: %.1f ms/step, %.0f tokens/s, %.1f TFLOP/s model, "
           "MFU %.1f%% of the bf16 peak, %.1f%% of the tf32 peak; reserved peak %.2f GB (accounted %.2f GB)\n",
           config_name, B, T, 1e3 * step_s, B * T / step_s, flops / step_s / 1e12, 100 * flops / step_s / 1e12 / bf16_peak,
           100 * flops / step_s / 1e12 / tf32_peak, device_reserved(&mem).peak / 1e9, mem.total_peak / 1e9);
    return 0;
}
