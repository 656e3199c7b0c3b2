// gpt2_cuda_ops.cu: GPT-2's layers on a GPU. Row-wise layers (layernorm,
// softmax) give each row to one warp of 32 threads, which reduce with shuffles;
// element-wise layers give each element a thread. cuBLAS is column-major, so a
// row-major (rows, cols) matrix is its (cols, rows) transpose: see matmul below.
#include <cuda_runtime.h>
#include <stdio.h>

#include "device/cuda_check.h"
#include "device/device.h"
#include "device/device_cuda.h"
#include "models/gpt2.h"
#include "models/gpt2_cuda_ops.h"

#define WARP 32
#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__device__ static float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ static float warp_max(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}

// Launch shape for one warp per row: 4 warps per block.
#define ROWS_PER_BLOCK 4
static unsigned int row_blocks(int rows) { return (unsigned int)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK); }

// Column sums (bias and layernorm parameter gradients): a block of
// COLUMN_TILE x SUM_LANES threads per tile of columns. Narrow tiles make many
// blocks (96 for GPT-2 small's 768 channels, against the H100's 132
// multiprocessors); a warp reads 4 rows' 8 consecutive columns, one 32-byte
// memory sector each.
#define COLUMN_TILE 8
#define SUM_LANES 128

// ---------------------------------------------------------------- encoder

// Element i of a table or gradient of `dtype`; adding x into one (bf16: rounded once).
__device__ static float element(const void *table, size_t i, DType dtype) {
    return dtype == DTYPE_BF16 ? bf16_to_float(((const bf16 *)table)[i]) : ((const float *)table)[i];
}
__device__ static void add_into(void *grad, size_t i, float x, DType dtype) {
    if (dtype == DTYPE_BF16) ((bf16 *)grad)[i] = bf16_from_float(bf16_to_float(((bf16 *)grad)[i]) + x);
    else ((float *)grad)[i] += x;
}

__global__ static void encoder_forward_kernel(float *out, const int *inp, const void *wte, const void *wpe,
                                              DType dtype, int BT, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * C) return;
    int bt = (int)(i / C), c = (int)(i % C), t = bt % T;
    out[i] = element(wte, (size_t)inp[bt] * C + c, dtype) + element(wpe, (size_t)t * C + c, dtype);
}

extern "C" void encoder_forward_cuda(float *out, const int *inp, const void *wte, const void *wpe, DType dtype,
                                     int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    encoder_forward_kernel<<<device_blocks(n, 256), 256>>>(out, inp, wte, wpe, dtype, B * T, T, C);
    CUDA_CHECK_LAUNCH();
}

// Deterministic: no atomics, every sum in a fixed order, so a GPU run repeats
// bit for bit. dwpe: one thread per (t, c) adds the B rows in order. dwte: one
// block per position in `positions_by_token` (the batch's positions sorted by
// token); the block that starts a token's run adds that run's rows in position
// order, one thread per channel.
__global__ static void wpe_backward_kernel(void *dwpe, DType grad_dtype, const float *dout, int B, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; b++) sum += dout[(size_t)b * T * C + i];
    add_into(dwpe, i, sum, grad_dtype);
}

__global__ static void wte_backward_kernel(void *dwte, DType grad_dtype, const float *dout, const int *inp,
                                           const int *positions_by_token, int BT, int C) {
    int first = blockIdx.x;
    int token = inp[positions_by_token[first]];
    if (first > 0 && inp[positions_by_token[first - 1]] == token) return;  // not the start of a run
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int j = first; j < BT && inp[positions_by_token[j]] == token; j++)
            sum += dout[(size_t)positions_by_token[j] * C + c];
        add_into(dwte, (size_t)token * C + c, sum, grad_dtype);
    }
}

extern "C" void encoder_backward_cuda(void *dwte, void *dwpe, DType grad_dtype, const float *dout, const int *inp,
                                      const int *positions_by_token, int B, int T, int C) {
    size_t TC = (size_t)T * C;
    wpe_backward_kernel<<<device_blocks(TC, 256), 256>>>(dwpe, grad_dtype, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
    wte_backward_kernel<<<B * T, C < 256 ? C : 256>>>(dwte, grad_dtype, dout, inp, positions_by_token, B * T, C);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- layernorm

// One warp normalizes one row; `residual`, when given, is a + b written first
// (the fused residual + layernorm).
__global__ static void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                                float *residual, const float *b, const float *weight,
                                                const float *bias, int rows, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    const float *x = inp + (size_t)row * C;
    if (residual) {
        float *r = residual + (size_t)row * C;
        const float *y = b + (size_t)row * C;
        for (int i = lane; i < C; i += WARP) r[i] = x[i] + y[i];
        __syncwarp();
        x = r;
    }
    float sum = 0;
    for (int i = lane; i < C; i += WARP) sum += x[i];
    float m = warp_sum(sum) / C;
    float var = 0;
    for (int i = lane; i < C; i += WARP) var += (x[i] - m) * (x[i] - m);
    float s = rsqrtf(warp_sum(var) / C + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int i = lane; i < C; i += WARP) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

extern "C" void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                                       const float *bias, int B, int T, int C) {
    layernorm_forward_kernel<<<row_blocks(B * T), ROWS_PER_BLOCK * WARP>>>(out, mean, rstd, inp, NULL, NULL, weight,
                                                                            bias, B * T, C);
    CUDA_CHECK_LAUNCH();
}

extern "C" void residual_layernorm_forward_cuda(float *residual, float *out, float *mean, float *rstd,
                                                const float *a, const float *b, const float *weight,
                                                const float *bias, int B, int T, int C) {
    layernorm_forward_kernel<<<row_blocks(B * T), ROWS_PER_BLOCK * WARP>>>(out, mean, rstd, a, residual, b, weight,
                                                                            bias, B * T, C);
    CUDA_CHECK_LAUNCH();
}

// dinp: one warp per row, with the row's two reductions.
__global__ static void layernorm_backward_input_kernel(float *dinp, const float *dout, const float *inp,
                                                       const float *weight, const float *mean, const float *rstd,
                                                       int rows, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    const float *dy = dout + (size_t)row * C, *x = inp + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], s = rstd[row];
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = lane; i < C; i += WARP) {
        float dnorm = weight[i] * dy[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (x[i] - m) * s;
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    for (int i = lane; i < C; i += WARP) {
        float norm = (x[i] - m) * s;
        dx[i] += (weight[i] * dy[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
}

// dweight, dbias: one thread per channel sums over the rows (deterministic).
// dweight[c] += sum over rows of (inp - mean) * rstd * dout, dbias[c] += sum of
// dout. A block sums a tile of COLUMN_TILE columns: thread (x, y) adds rows y,
// y + SUM_LANES, ... of column x, then thread y = 0 adds the lanes in order:
// the same order every run.
__global__ static void layernorm_backward_params_kernel(float *dweight, float *dbias, const float *dout,
                                                        const float *inp, const float *mean, const float *rstd,
                                                        int rows, int C) {
    __shared__ float dw_lanes[SUM_LANES][COLUMN_TILE + 1], db_lanes[SUM_LANES][COLUMN_TILE + 1];
    int c = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float dw = 0, db = 0;
    if (c < C) {
        for (int row = threadIdx.y; row < rows; row += SUM_LANES) {
            float dy = dout[(size_t)row * C + c];
            db += dy;
            dw += (inp[(size_t)row * C + c] - mean[row]) * rstd[row] * dy;
        }
    }
    dw_lanes[threadIdx.y][threadIdx.x] = dw;
    db_lanes[threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    for (int lane = 1; lane < SUM_LANES; lane++) {
        dw += dw_lanes[lane][threadIdx.x];
        db += db_lanes[lane][threadIdx.x];
    }
    dweight[c] += dw;
    dbias[c] += db;
}

extern "C" void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                                        const float *inp, const float *weight, const float *mean, const float *rstd,
                                        int B, int T, int C) {
    layernorm_backward_input_kernel<<<row_blocks(B * T), ROWS_PER_BLOCK * WARP>>>(dinp, dout, inp, weight, mean,
                                                                                   rstd, B * T, C);
    CUDA_CHECK_LAUNCH();
    layernorm_backward_params_kernel<<<device_blocks((size_t)C, COLUMN_TILE), dim3(COLUMN_TILE, SUM_LANES)>>>(
        dweight, dbias, dout, inp, mean, rstd, B * T, C);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- matmul

__global__ static void add_bias_kernel(float *out, const float *bias, size_t rows, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * OC) out[i] += bias[i % OC];
}

__global__ static void bias_gelu_kernel(float *pre, float *out, const float *bias, size_t rows, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * OC) return;
    float x = pre[i] + bias[i % OC];
    pre[i] = x;
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

// dbias[o] += sum over rows of dout[row][o], in column tiles as the layernorm's
// parameter gradients above.
__global__ static void bias_backward_kernel(float *dbias, const float *dout, int rows, int OC) {
    __shared__ float lanes[SUM_LANES][COLUMN_TILE + 1];
    int o = blockIdx.x * COLUMN_TILE + threadIdx.x;
    float sum = 0;
    if (o < OC)
        for (int row = threadIdx.y; row < rows; row += SUM_LANES) sum += dout[(size_t)row * OC + o];
    lanes[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || o >= OC) return;
    for (int lane = 1; lane < SUM_LANES; lane++) sum += lanes[lane][threadIdx.x];
    dbias[o] += sum;
}

// bf16 operands: each matrix rounded into its own part of the operands buffer
// (gpt2_product_operands counts them), the parts GPT2_OPERAND_ALIGN aligned.
static size_t aligned(size_t count) { return (count + GPT2_OPERAND_ALIGN - 1) / GPT2_OPERAND_ALIGN * GPT2_OPERAND_ALIGN; }

// Rounds `count` fp32 values into bf16 at operands[*at], and moves *at past them.
static const bf16 *rounded(bf16 *operands, size_t *at, const float *values, size_t count) {
    bf16 *part = operands + *at;
    device_round(part, values, count);
    *at += aligned(count);
    return part;
}

// C (m, n) = op(A) op(B) + beta C in cuBLAS's column-major terms, with A and B
// fp32, or bf16 when `bf16_operands`, accumulated in fp32. C is fp32, or bf16
// (c_dtype, bf16 operands only): the sum, beta C included, rounded once into it.
static void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, float beta, void *C, DType c_dtype, int ldc, int bf16_operands) {
    const float one = 1.0f;
    if (!bf16_operands) {
        CUBLAS_CHECK(cublasSgemm(device_cublas(), op_a, op_b, m, n, k, &one, (const float *)A, lda, (const float *)B,
                                 ldb, &beta, (float *)C, ldc));
        return;
    }
    CUBLAS_CHECK(cublasGemmEx(device_cublas(), op_a, op_b, m, n, k, &one, A, CUDA_R_16BF, lda, B, CUDA_R_16BF, ldb,
                              &beta, C, c_dtype == DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

// A product with cuBLASLt's epilogue fused in, on bf16 operands: D (m, n) =
// op(A) op(B) in gemm's column-major terms, then CUBLASLT_EPILOGUE_BIAS adds
// bias (m) to each column; _GELU_AUX_BIAS also keeps that sum in aux (m, n)
// and writes GELU of it. D and aux are fp32, accumulated in fp32. (GELU's
// backward in the next product's epilogue, _DGELU, was measured slower on an
// H200 than the product and gelu_backward_cuda apart: 11.2 against 9.9 ms a
// step at d12, B = 16, so it is not used.) Returns cuBLASLt's status: an epilogue it
// has no kernel for on this GPU and these types is an answer, not an error, and
// the caller runs the separate kernels instead (said once on stderr).
static cublasStatus_t lt_gemm(cublasLtEpilogue_t epilogue, cublasOperation_t op_a, cublasOperation_t op_b, int m,
                              int n, int k, const bf16 *A, int lda, const bf16 *B, int ldb, float *D, int ldd,
                              const float *bias, const float *aux) {
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
    cublasLtMatmulPreference_t preference = NULL;
    cublasLtMatmulHeuristicResult_t found;
    int results = 0;
    int64_t aux_ld = ldd;
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t status;
    do {  // each step only if the ones before succeeded; everything made is destroyed below
        if ((status = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F))) break;
        if ((status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a))) break;
        if ((status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b))) break;
        if ((status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue)))
            break;
        if (bias && (status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                             sizeof bias)))
            break;
        if (aux && ((status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
                                                             sizeof aux)) ||
                    (status = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                             sizeof aux_ld))))
            break;
        if ((status = cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, op_a == CUBLAS_OP_N ? m : k,
                                                 op_a == CUBLAS_OP_N ? k : m, lda)))
            break;
        if ((status = cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, op_b == CUBLAS_OP_N ? k : n,
                                                 op_b == CUBLAS_OP_N ? n : k, ldb)))
            break;
        if ((status = cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, m, n, ldd))) break;
        if ((status = cublasLtMatmulPreferenceCreate(&preference))) break;  // no workspace: none to account for
        if ((status = cublasLtMatmulAlgoGetHeuristic(device_cublaslt(), desc, a, b, d, d, preference, 1, &found,
                                                     &results)))
            break;
        if (results == 0) {
            status = CUBLAS_STATUS_NOT_SUPPORTED;
            break;
        }
        status = cublasLtMatmul(device_cublaslt(), desc, &one, A, a, B, b, &zero, D, d, D, d, &found.algo, NULL, 0, 0);
    } while (0);
    if (preference) CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    if (d) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(d));
    if (b) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b));
    if (a) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a));
    if (desc) CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
    static int said;  // the one process-wide flag: say a missing epilogue once, not at every product
    if (status != CUBLAS_STATUS_SUCCESS && !said) {
        said = 1;
        fprintf(stderr, "shardlab: cuBLASLt has no kernel for epilogue %d here (%s): the separate kernels run\n",
                (int)epilogue, cublasGetStatusString(status));
    }
    return status;
}

// Row-major out (rows, OC) = inp (rows, C) @ weight^T + bias, weight (OC, C); with
// pre, pre = that and out = GELU(pre). In cuBLAS's column-major terms: out^T
// (OC, rows) = op(A = weight as stored, transposed) @ inp as stored. bf16
// operands take the bias and GELU in the product's epilogue where cuBLASLt
// can; fp32 ones (and the fallback) add them in a kernel after it.
static void product_forward(float *out, float *pre, const float *inp, const void *weight, const float *bias,
                            int rows, int C, int OC, const Bf16Products *products) {
    const void *x = inp;
    if (products) {
        size_t at = 0;
        x = rounded(products->operands, &at, inp, (size_t)rows * C);
        cublasLtEpilogue_t epilogue = pre ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
        if (bias && lt_gemm(epilogue, CUBLAS_OP_T, CUBLAS_OP_N, OC, rows, C, (const bf16 *)weight, C, (const bf16 *)x,
                            C, out, OC, bias, pre) == CUBLAS_STATUS_SUCCESS)
            return;
    }
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, rows, C, weight, C, x, C, 0.0f, pre ? pre : out, DTYPE_FP32, OC,
         products != NULL);
    if (pre)
        bias_gelu_kernel<<<device_blocks((size_t)rows * OC, 256), 256>>>(pre, out, bias, rows, OC);
    else if (bias)
        add_bias_kernel<<<device_blocks((size_t)rows * OC, 256), 256>>>(out, bias, rows, OC);
    CUDA_CHECK_LAUNCH();
}

extern "C" void matmul_forward_cuda(float *out, const float *inp, const void *weight, const float *bias, int B,
                                    int T, int C, int OC, const Bf16Products *products) {
    product_forward(out, NULL, inp, weight, bias, B * T, C, OC, products);
}

extern "C" void matmul_bias_gelu_forward_cuda(float *pre, float *out, const float *inp, const void *weight,
                                              const float *bias, int B, int T, int C, int OC,
                                              const Bf16Products *products) {
    product_forward(out, pre, inp, weight, bias, B * T, C, OC, products);
}

extern "C" void matmul_backward_cuda(float *dinp, void *dweight, float *dbias, const float *dout, const float *inp,
                                     const void *weight, int B, int T, int C, int OC, DinpMode mode,
                                     const Bf16Products *products) {
    int rows = B * T;
    const void *x = inp, *dy = dout;
    if (products) {
        size_t at = 0;
        x = rounded(products->operands, &at, inp, (size_t)rows * C);
        dy = rounded(products->operands, &at, dout, (size_t)rows * OC);
    }
    // dinp (rows, C) (+)= dout (rows, OC) @ weight (OC, C)
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, rows, OC, weight, C, dy, OC, mode == DINP_ADD ? 1.0f : 0.0f, dinp, DTYPE_FP32, C,
         products != NULL);
    // dweight (OC, C) += dout^T (OC, rows) @ inp (rows, C)
    DType dweight_dtype = products ? products->grad_dtype : DTYPE_FP32;
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, rows, x, C, dy, OC, 1.0f, dweight, dweight_dtype, C, products != NULL);
    if (!dbias) return;
    bias_backward_kernel<<<device_blocks((size_t)OC, COLUMN_TILE), dim3(COLUMN_TILE, SUM_LANES)>>>(dbias, dout, rows,
                                                                                                   OC);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- attention

// The attention that keeps its probabilities runs on fp32 data, or on bf16 in a
// bf16 run (as llm.c's): its kernels take either element type, loading into fp32
// and rounding what they store (a store of fp32 is exact).
__device__ static float load(float x) { return x; }
__device__ static float load(bf16 x) { return bf16_to_float(x); }
__device__ static void store(float *p, float x) { *p = x; }
__device__ static void store(bf16 *p, float x) { *p = bf16_from_float(x); }

// qkv (B, T, 3, NH, hs) -> q, k, v (B, NH, T, hs) each, so that each (b, h) is
// one contiguous (T, hs) matrix for a strided-batched gemm.
template <typename E>
__global__ static void permute_kernel(E *q, E *k, E *v, const float *qkv, int B, int T, int NH, int hs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * hs) return;
    int d = (int)(i % hs), t = (int)((i / hs) % T), h = (int)((i / hs / T) % NH), b = (int)(i / hs / T / NH);
    size_t C = (size_t)NH * hs, from = (size_t)b * T * 3 * C + (size_t)t * 3 * C + (size_t)h * hs + d;
    store(&q[i], qkv[from]);
    store(&k[i], qkv[from + C]);
    store(&v[i], qkv[from + 2 * C]);
}

// The reverse for a gradient: dq, dk, dv (B, NH, T, hs) -> dqkv (B, T, 3, NH, hs), added.
template <typename E>
__global__ static void unpermute_qkv_kernel(float *dqkv, const E *dq, const E *dk, const E *dv, int B, int T, int NH,
                                            int hs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * hs) return;
    int d = (int)(i % hs), t = (int)((i / hs) % T), h = (int)((i / hs / T) % NH), b = (int)(i / hs / T / NH);
    size_t C = (size_t)NH * hs, to = (size_t)b * T * 3 * C + (size_t)t * 3 * C + (size_t)h * hs + d;
    dqkv[to] += load(dq[i]);
    dqkv[to + C] += load(dk[i]);
    dqkv[to + 2 * C] += load(dv[i]);
}

// (B, NH, T, hs) <-> (B, T, NH, hs) for the attention output and its gradient.
template <typename Dst, typename Src>
__global__ static void head_major_kernel(Dst *dst, const Src *src, int B, int T, int NH, int hs, int to_heads) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)B * NH * T * hs) return;
    int d = (int)(i % hs), t = (int)((i / hs) % T), h = (int)((i / hs / T) % NH), b = (int)(i / hs / T / NH);
    size_t token_major = (size_t)b * T * NH * hs + (size_t)t * NH * hs + (size_t)h * hs + d;
    if (to_heads) store(&dst[i], load(src[token_major]));
    else store(&dst[token_major], load(src[i]));
}

// Causal softmax of one row of scores per warp; entries above the diagonal become
// 0. Each probability is exp(s - max) / sum from its score, rounded once.
template <typename E>
__global__ static void causal_softmax_kernel(E *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    E *a = att + (size_t)row * T;
    float maxval = -INFINITY;
    for (int j = lane; j <= t; j += WARP) maxval = fmaxf(maxval, load(a[j]));
    maxval = warp_max(maxval);
    float sum = 0;
    for (int j = lane; j <= t; j += WARP) sum += expf(load(a[j]) - maxval);
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < T; j += WARP) store(&a[j], j <= t ? expf(load(a[j]) - maxval) * inv : 0.0f);
}

// datt -> dpreatt in place: dpre = att * (datt - sum(att * datt)), row by row.
template <typename E>
__global__ static void softmax_backward_kernel(E *datt, const E *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    const E *a = att + (size_t)row * T;
    E *d = datt + (size_t)row * T;
    float dot = 0;
    for (int j = lane; j <= t; j += WARP) dot += load(a[j]) * load(d[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += WARP) store(&d[j], j <= t ? load(a[j]) * (load(d[j]) - dot) : 0.0f);
}

// The same two kernels on bf16 rows whose length T is a multiple of 8: each lane
// moves 8 values (16 bytes) at a time, as one 2-byte value per lane would leave
// the kernel short of memory bandwidth. Same arithmetic, summed in another order.
#define PACK 8  // bf16 values in 16 bytes
union Pack {
    uint4 bits;
    bf16 v[PACK];
};

__global__ static void causal_softmax_packed_kernel(bf16 *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    bf16 *a = att + (size_t)row * T;
    Pack p;
    float maxval = -INFINITY;
    for (int j0 = lane * PACK; j0 <= t; j0 += WARP * PACK) {
        p.bits = *(const uint4 *)(a + j0);
        for (int e = 0; e < PACK && j0 + e <= t; e++) maxval = fmaxf(maxval, bf16_to_float(p.v[e]));
    }
    maxval = warp_max(maxval);
    float sum = 0;
    for (int j0 = lane * PACK; j0 <= t; j0 += WARP * PACK) {
        p.bits = *(const uint4 *)(a + j0);
        for (int e = 0; e < PACK && j0 + e <= t; e++) sum += expf(bf16_to_float(p.v[e]) - maxval);
    }
    float inv = 1.0f / warp_sum(sum);
    for (int j0 = lane * PACK; j0 < T; j0 += WARP * PACK) {
        if (j0 <= t) p.bits = *(const uint4 *)(a + j0);
        for (int e = 0; e < PACK; e++)
            p.v[e] = bf16_from_float(j0 + e <= t ? expf(bf16_to_float(p.v[e]) - maxval) * inv : 0.0f);
        *(uint4 *)(a + j0) = p.bits;
    }
}

__global__ static void softmax_backward_packed_kernel(bf16 *datt, const bf16 *att, int rows, int T) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / WARP, lane = threadIdx.x % WARP;
    if (row >= rows) return;
    int t = row % T;
    const bf16 *a = att + (size_t)row * T;
    bf16 *d = datt + (size_t)row * T;
    Pack pa, pd;
    float dot = 0;
    for (int j0 = lane * PACK; j0 <= t; j0 += WARP * PACK) {
        pa.bits = *(const uint4 *)(a + j0);
        pd.bits = *(const uint4 *)(d + j0);
        for (int e = 0; e < PACK && j0 + e <= t; e++) dot += bf16_to_float(pa.v[e]) * bf16_to_float(pd.v[e]);
    }
    dot = warp_sum(dot);
    for (int j0 = lane * PACK; j0 < T; j0 += WARP * PACK) {
        if (j0 <= t) {
            pa.bits = *(const uint4 *)(a + j0);
            pd.bits = *(const uint4 *)(d + j0);
        }
        for (int e = 0; e < PACK; e++)
            pd.v[e] = bf16_from_float(j0 + e <= t ? bf16_to_float(pa.v[e]) * (bf16_to_float(pd.v[e]) - dot) : 0.0f);
        *(uint4 *)(d + j0) = pd.bits;
    }
}

// Launches the row kernels: packed where the rows are bf16, of a length that is a
// multiple of 8, from 16-byte aligned memory.
template <typename E>
static void causal_softmax(E *att, int rows, int T) {
    if (sizeof(E) == sizeof(bf16) && T % PACK == 0 && (uintptr_t)att % 16 == 0)
        causal_softmax_packed_kernel<<<row_blocks(rows), ROWS_PER_BLOCK * WARP>>>((bf16 *)att, rows, T);
    else
        causal_softmax_kernel<<<row_blocks(rows), ROWS_PER_BLOCK * WARP>>>(att, rows, T);
    CUDA_CHECK_LAUNCH();
}

template <typename E>
static void softmax_backward(E *datt, const E *att, int rows, int T) {
    if (sizeof(E) == sizeof(bf16) && T % PACK == 0 && (uintptr_t)att % 16 == 0 && (uintptr_t)datt % 16 == 0)
        softmax_backward_packed_kernel<<<row_blocks(rows), ROWS_PER_BLOCK * WARP>>>((bf16 *)datt, (const bf16 *)att,
                                                                                    rows, T);
    else
        softmax_backward_kernel<<<row_blocks(rows), ROWS_PER_BLOCK * WARP>>>(datt, att, rows, T);
    CUDA_CHECK_LAUNCH();
}

// A product per (batch row, head), column-major as gemm above: fp32 through
// cublasSgemmStridedBatched (TF32 where cuBLAS may), or bf16 operands and
// result with fp32 accumulation.
static void strided_gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                         const void *A, int lda, long long stride_a, const void *Bm, int ldb, long long stride_b,
                         void *Cm, int ldc, long long stride_c, int batches, int bf16_data) {
    const float beta = 0.0f;
    if (!bf16_data) {
        CUBLAS_CHECK(cublasSgemmStridedBatched(device_cublas(), op_a, op_b, m, n, k, &alpha, (const float *)A, lda,
                                               stride_a, (const float *)Bm, ldb, stride_b, &beta, (float *)Cm, ldc,
                                               stride_c, batches));
        return;
    }
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(device_cublas(), op_a, op_b, m, n, k, &alpha, A, CUDA_R_16BF, lda, stride_a,
                                            Bm, CUDA_R_16BF, ldb, stride_b, &beta, Cm, CUDA_R_16BF, ldc, stride_c,
                                            batches, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// out = in (B,NH,T,T) with drop's mask of the probabilities: element h*T + t2
// of row b's position t, as the CPU's drop_probabilities.
template <typename E>
__global__ static void dropout_probabilities_kernel(E *out, const E *in, Dropout drop, size_t n, int NH, int T) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, per_row = (size_t)NH * T * T;
    if (i >= n) return;
    int b = (int)(i / per_row), h = (int)(i / ((size_t)T * T) % NH), t = (int)(i / T % T), t2 = (int)(i % T);
    uint64_t key = dropout_row_key(&drop, b, t);
    float value = load(in[i]);
    store(&out[i], dropout_keep(&drop, key, (uint64_t)h * T + t2) ? value * drop.scale : 0.0f);
}

template <typename E>
static void drop_probabilities(E *out, const E *in, const Dropout *drop, int B, int NH, int T) {
    size_t n = (size_t)B * NH * T * T;
    dropout_probabilities_kernel<<<device_blocks(n, 256), 256>>>(out, in, *drop, n, NH, T);
    CUDA_CHECK_LAUNCH();
}

__global__ static void dropout_apply_kernel(float *out, const float *in, Dropout drop, size_t n, int T, int C) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int b = (int)(i / ((size_t)T * C)), t = (int)(i / C % T), c = (int)(i % C);
    uint64_t key = dropout_row_key(&drop, b, t);
    float value = in[i];
    out[i] = dropout_keep(&drop, key, (uint64_t)c) ? value * drop.scale : 0.0f;
}

extern "C" void dropout_apply_cuda(float *out, const float *in, const Dropout *drop, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (n == 0) return;
    dropout_apply_kernel<<<device_blocks(n, 256), 256>>>(out, in, *drop, n, T, C);
    CUDA_CHECK_LAUNCH();
}

// The attention keeping its probabilities on E (fp32 or bf16) data; `att`,
// `dropped`, the scratch buffers hold E elements from their start.
template <typename E>
static void attention_forward(float *out, E *att, const float *qkv, E *scratch, E *dropped, const Dropout *drop,
                              int B, int T, int C, int NH) {
    int hs = C / NH, batches = B * NH, bf16_data = sizeof(E) == sizeof(bf16);
    size_t n = (size_t)B * T * C;
    E *q = scratch, *k = scratch + n, *v = scratch + 2 * n, *y = scratch + 3 * n;
    long long mat = (long long)T * hs, tt = (long long)T * T;
    permute_kernel<<<device_blocks(n, 256), 256>>>(q, k, v, qkv, B, T, NH, hs);
    CUDA_CHECK_LAUNCH();
    // att (T, T) = scale * q @ k^T, per (b, h); column-major: att^T = k q^T
    strided_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f / sqrtf((float)hs), k, hs, mat, q, hs, mat, att, T, tt,
                 batches, bf16_data);
    causal_softmax(att, batches * T, T);
    if (drop) drop_probabilities(dropped, att, drop, B, NH, T);
    // y (T, hs) = att @ v (the dropped probabilities with drop)
    strided_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, mat, drop ? dropped : att, T, tt, y, hs, mat,
                 batches, bf16_data);
    head_major_kernel<<<device_blocks(n, 256), 256>>>(out, y, B, T, NH, hs, 0);
    CUDA_CHECK_LAUNCH();
}

template <typename E>
static void attention_backward(float *dqkv, const float *dout, const float *qkv, const E *att, E *scratch,
                               E *dscratch, E *datt, const Dropout *drop, int B, int T, int C, int NH) {
    int hs = C / NH, batches = B * NH, bf16_data = sizeof(E) == sizeof(bf16);
    size_t n = (size_t)B * T * C;
    E *q = scratch, *k = scratch + n, *v = scratch + 2 * n, *dy = scratch + 3 * n;
    E *dq = dscratch, *dk = dscratch + n, *dv = dscratch + 2 * n;
    long long mat = (long long)T * hs, tt = (long long)T * T;
    float scale = 1.0f / sqrtf((float)hs);
    permute_kernel<<<device_blocks(n, 256), 256>>>(q, k, v, qkv, B, T, NH, hs);
    CUDA_CHECK_LAUNCH();
    head_major_kernel<<<device_blocks(n, 256), 256>>>(dy, dout, B, T, NH, hs, 1);
    CUDA_CHECK_LAUNCH();
    // dv (T, hs) = att^T @ dy, of the probabilities that multiplied v (dropped, in datt for now)
    if (drop) drop_probabilities(datt, att, drop, B, NH, T);
    strided_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dy, hs, mat, drop ? datt : att, T, tt, dv, hs, mat,
                 batches, bf16_data);
    // datt (T, T) = dy @ v^T, through the same mask back to the probabilities
    strided_gemm(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, mat, dy, hs, mat, datt, T, tt, batches, bf16_data);
    if (drop) drop_probabilities(datt, datt, drop, B, NH, T);
    softmax_backward(datt, att, batches * T, T);
    // dq = scale * dpre @ k ; dk = scale * dpre^T @ q
    strided_gemm(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, scale, k, hs, mat, datt, T, tt, dq, hs, mat, batches, bf16_data);
    strided_gemm(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, scale, q, hs, mat, datt, T, tt, dk, hs, mat, batches, bf16_data);
    unpermute_qkv_kernel<<<device_blocks(n, 256), 256>>>(dqkv, dq, dk, dv, B, T, NH, hs);
    CUDA_CHECK_LAUNCH();
}

extern "C" void attention_forward_cuda(float *out, float *att, const float *qkv, float *scratch, float *dropped,
                                       const Dropout *drop, int B, int T, int C, int NH, AttentionMath math) {
    if (math == ATTENTION_BF16)
        attention_forward(out, (bf16 *)att, qkv, (bf16 *)scratch, (bf16 *)dropped, drop, B, T, C, NH);
    else
        attention_forward(out, att, qkv, scratch, dropped, drop, B, T, C, NH);
}

extern "C" void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *att,
                                        float *scratch, float *dscratch, float *datt, const Dropout *drop, int B,
                                        int T, int C, int NH, AttentionMath math) {
    if (math == ATTENTION_BF16)
        attention_backward(dqkv, dout, qkv, (const bf16 *)att, (bf16 *)scratch, (bf16 *)dscratch, (bf16 *)datt, drop,
                           B, T, C, NH);
    else
        attention_backward(dqkv, dout, qkv, att, scratch, dscratch, datt, drop, B, T, C, NH);
}

// ---------------------------------------------------------------- gelu, residual

__global__ static void gelu_forward_kernel(float *out, const float *inp, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}

__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, int N, DinpMode mode) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float x = inp[i];
    float arg = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(arg), ch = coshf(arg);
    float grad = 0.5f * (1.0f + th) + x * 0.5f / (ch * ch) * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = mode == DINP_ADD ? dinp[i] + grad * dout[i] : grad * dout[i];
}

__global__ static void residual_forward_kernel(float *out, const float *a, const float *b, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = a[i] + b[i];
}

extern "C" void gelu_forward_cuda(float *out, const float *inp, int N) {
    gelu_forward_kernel<<<device_blocks((size_t)N, 256), 256>>>(out, inp, N);
    CUDA_CHECK_LAUNCH();
}

extern "C" void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, int N, DinpMode mode) {
    gelu_backward_kernel<<<device_blocks((size_t)N, 256), 256>>>(dinp, inp, dout, N, mode);
    CUDA_CHECK_LAUNCH();
}

extern "C" void residual_forward_cuda(float *out, const float *a, const float *b, int N) {
    residual_forward_kernel<<<device_blocks((size_t)N, 256), 256>>>(out, a, b, N);
    CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------- softmax + cross-entropy

// A row's max over x[0..V) and sum of exp(x - max), reduced by the block's
// threads through `shared` (one float per warp); every thread gets both.
__device__ static void softmax_stats(const float *x, int V, float *shared, float *max_out, float *sum_out) {
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, warps = blockDim.x / WARP;
    float maxval = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) maxval = fmaxf(maxval, x[i]);
    maxval = warp_max(maxval);
    if (lane == 0) shared[warp] = maxval;
    __syncthreads();
    maxval = shared[0];
    for (int w = 1; w < warps; w++) maxval = fmaxf(maxval, shared[w]);
    __syncthreads();
    float sum = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) sum += expf(x[i] - maxval);
    sum = warp_sum(sum);
    if (lane == 0) shared[warp] = sum;
    __syncthreads();
    sum = 0;
    for (int w = 0; w < warps; w++) sum += shared[w];
    *max_out = maxval;
    *sum_out = sum;
}

// One block of 256 threads per row: max, sum of exponentials, probabilities and
// the loss in one kernel.
__global__ static void softmax_crossentropy_kernel(float *losses, float *probs, const float *logits,
                                                   const int *targets, int V, int Vp) {
    __shared__ float shared[256 / WARP];
    int row = blockIdx.x;
    const float *x = logits + (size_t)row * Vp;
    float *p = probs + (size_t)row * Vp;
    float maxval, sum;
    softmax_stats(x, V, shared, &maxval, &sum);
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) p[i] = i < V ? expf(x[i] - maxval) / sum : 0.0f;
    if (threadIdx.x == 0) losses[row] = logf(sum) - (x[targets[row]] - maxval);  // -log p(target)
}

// --fused-classifier: the kernel above and crossentropy_backward_kernel in one,
// in place: the loss, then each logit overwritten by its gradient, each from the
// same arithmetic as theirs; the probabilities never reach memory.
__global__ static void softmax_crossentropy_fused_kernel(float *losses, float *logits, const int *targets,
                                                         float dloss, int V, int Vp) {
    __shared__ float shared[256 / WARP];
    int row = blockIdx.x, target = targets[row];
    float *x = logits + (size_t)row * Vp;
    float target_logit = x[target];  // read before any thread writes: softmax_stats syncs in between
    float maxval, sum;
    softmax_stats(x, V, shared, &maxval, &sum);
    if (threadIdx.x == 0) losses[row] = logf(sum) - (target_logit - maxval);
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {  // each thread its own columns: no races
        float p = i < V ? expf(x[i] - maxval) / sum : 0.0f, indicator = i == target ? 1.0f : 0.0f;
        x[i] = i < V ? (p - indicator) * dloss : 0.0f;
    }
}

__global__ static void crossentropy_backward_kernel(float *dlogits, const float *probs, const int *targets,
                                                    float dloss, size_t rows, int V, int Vp) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * Vp) return;
    size_t row = i / Vp;
    int col = (int)(i % Vp);
    float indicator = col == targets[row] ? 1.0f : 0.0f;
    dlogits[i] = col < V ? (probs[i] - indicator) * dloss : 0.0f;
}

extern "C" void softmax_crossentropy_forward_cuda(float *losses, float *probs, const float *logits,
                                                  const int *targets, int B, int T, int V, int Vp) {
    softmax_crossentropy_kernel<<<B * T, 256>>>(losses, probs, logits, targets, V, Vp);
    CUDA_CHECK_LAUNCH();
}

extern "C" void softmax_crossentropy_fused_cuda(float *losses, float *logits, const int *targets, float dloss,
                                                int B, int T, int V, int Vp) {
    softmax_crossentropy_fused_kernel<<<B * T, 256>>>(losses, logits, targets, dloss, V, Vp);
    CUDA_CHECK_LAUNCH();
}

extern "C" void softmax_crossentropy_backward_cuda(float *dlogits, const float *probs, const int *targets,
                                                   float dloss, int B, int T, int V, int Vp) {
    size_t rows = (size_t)B * T;
    crossentropy_backward_kernel<<<device_blocks(rows * Vp, 256), 256>>>(dlogits, probs, targets, dloss, rows, V, Vp);
    CUDA_CHECK_LAUNCH();
}
