// attention_cuda.cu: causal self-attention fused into one pass over the keys
// (flash-style), forward and backward, with no (T, T) matrix in device memory.
//
// A block takes one (batch row b, head h) and a tile of TILE query rows (or, in
// the backward's dK/dV kernel, of key rows); each of its 4 warps owns 16 of
// them. It walks the tiles of the other side that the causal mask lets through,
// one tile of K and V (or Q and dO) in shared memory at a time:
//
//   forward, per query row q:      s_k = scale * q.k_k           for keys k <= q
//     m = max s,  l = sum exp(s - m),  out = sum exp(s - m) v_k / l   (online: m, l
//     and out are rescaled when a later tile raises m);  lse_q = m + log l is kept
//   backward, with p_qk = exp(s_qk - lse_q) recomputed and D_q = dout_q . out_q:
//     dv_k += p_qk dout_q      dp_qk = dout_q . v_k      ds_qk = p_qk (dp_qk - D_q)
//     dk_k += scale ds_qk q_q  dq_q += scale ds_qk k_k
//
// dK and dV are summed by a block per key tile, dQ by a block per query tile, so
// no two blocks add into one value and the result repeats bit for bit (no atomics).
// The products run on tensor cores (WMMA, 16x16 tiles, fp32 accumulation) with
// bf16 or TF32 operands, or as plain fp32 multiply-adds (ATTENTION_FP32). With
// dropout, p_qk is dropped and scaled where it multiplies v (and so dp_qk where it
// flows back), with the CPU's masks: dropout.h's element h*T + k of position q.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <type_traits>

#include "../common/cuda_check.h"
#include "../common/device_cuda.h"
#include "gpt2_cuda_ops.h"

using namespace nvcuda;

#define TILE 64          // query or key rows a block holds
#define HEAD_PAD 64      // the head size, zero-padded in shared memory (hs <= HEAD_PAD)
#define TILE_WARPS 4     // each owns 16 rows of the tile
#define WARP_ROWS 16

// The operands' type in shared memory and the tensor-core fragments, per arithmetic.
template <int MATH> struct Operands;
template <> struct Operands<ATTENTION_FP32> {
    typedef float type;
};
template <> struct Operands<ATTENTION_TF32> {
    typedef float type;
    enum { K_STEP = 8 };
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a_frag;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b_row_frag;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b_col_frag;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc_frag;
};
template <> struct Operands<ATTENTION_BF16> {
    typedef __nv_bfloat16 type;
    enum { K_STEP = 16 };
    typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a_frag;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b_row_frag;
    typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b_col_frag;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;
};

__device__ static inline void to_operand(float *dst, float x) { *dst = x; }
__device__ static inline void to_operand(__nv_bfloat16 *dst, float x) { *dst = __float2bfloat16_rn(x); }

template <class Frag> __device__ static inline void round_tf32(Frag &f) {
    for (int i = 0; i < f.num_elements; i++) f.x[i] = wmma::__float_to_tf32(f.x[i]);
}

// One warp: Cm (16, N) (+)= A (16, K) @ Bm^T with Bm (N, K) when TRANSPOSED_B,
// else A @ Bm with Bm (K, N); all row-major in shared memory, N and K multiples of 16.
template <int MATH, bool TRANSPOSED_B>
__device__ static void warp_product(float *Cm, int ldc, const typename Operands<MATH>::type *A, int lda,
                                    const typename Operands<MATH>::type *Bm, int ldb, int N, int K, int accumulate) {
    if constexpr (MATH == ATTENTION_FP32) {
        int lane = threadIdx.x % 32;
        for (int e = lane; e < WARP_ROWS * N; e += 32) {
            int r = e / N, c = e % N;
            float dot = 0;
            for (int k = 0; k < K; k++)
                dot = fmaf(A[r * lda + k], TRANSPOSED_B ? Bm[c * ldb + k] : Bm[k * ldb + c], dot);
            Cm[r * ldc + c] = accumulate ? Cm[r * ldc + c] + dot : dot;
        }
    } else {
        typedef Operands<MATH> O;
        // Bm^T's column n is Bm's row n: Bm read column-major
        typedef typename std::conditional<TRANSPOSED_B, typename O::b_col_frag, typename O::b_row_frag>::type b_frag;
        for (int j = 0; j < N / 16; j++) {
            typename O::acc_frag acc;
            if (accumulate) wmma::load_matrix_sync(acc, Cm + j * 16, ldc, wmma::mem_row_major);
            else wmma::fill_fragment(acc, 0.0f);
            for (int k = 0; k < K; k += O::K_STEP) {
                typename O::a_frag a;
                b_frag b;
                wmma::load_matrix_sync(a, A + k, lda);
                wmma::load_matrix_sync(b, TRANSPOSED_B ? Bm + (size_t)j * 16 * ldb + k : Bm + (size_t)k * ldb + j * 16,
                                       ldb);
                if constexpr (MATH == ATTENTION_TF32) {
                    round_tf32(a);
                    round_tf32(b);
                }
                wmma::mma_sync(acc, a, b, acc);
            }
            wmma::store_matrix_sync(Cm + j * 16, acc, ldc, wmma::mem_row_major);
        }
    }
    __syncwarp();
}

// Row strides in shared memory, padded so that a warp's lanes, which walk 16
// rows at once, do not all land in the same memory bank (and fragment loads stay
// 32-byte aligned): operand tiles (TILE, OP_LD), probabilities as operands
// (TILE, P_LD), fp32 scores (TILE, S_LD), fp32 accumulators (TILE, ACC_LD).
#define OP_LD (HEAD_PAD + 8)
#define P_LD (TILE + 8)
#define S_LD (TILE + 4)
#define ACC_LD (HEAD_PAD + 4)

// The whole block: TILE rows from row0 of a (T, hs) slice with row stride
// `stride` into dst (TILE, OP_LD), zeros past T and past hs.
template <class Op>
__device__ static void load_tile(Op *dst, const float *src, int row0, int T, int hs, size_t stride) {
    for (int i = threadIdx.x; i < TILE * HEAD_PAD; i += blockDim.x) {
        int r = i / HEAD_PAD, d = i % HEAD_PAD, t = row0 + r;
        to_operand(&dst[r * OP_LD + d], t < T && d < hs ? src[(size_t)t * stride + d] : 0.0f);
    }
}

// The dropout factor of probability (q, k) of head h: 0 or 1 / (1 - RATE); 1 without dropout.
__device__ static inline float dropout_factor(const Dropout *drop, int b, int q, int h, int T, int k) {
    if (!drop) return 1.0f;
    return dropout_keep(drop, dropout_row_key(drop, b, q), (uint64_t)h * T + k) ? drop->scale : 0.0f;
}

// Each lane of a warp takes every other column of one of the warp's 16 rows:
// row lane / 2, columns lane % 2, + 2, + 4, ...
#define LANE_ROW(lane) ((lane) / 2)
#define LANE_COLUMN0(lane) ((lane) % 2)

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,3C). Grid (query tiles, B*NH), TILE_WARPS warps.
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_forward_kernel(float *out, float *lse, const float *qkv, Dropout drop, int dropping, int T, int NH,
                             int hs) {
    typedef typename Operands<MATH>::type Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Qs = (Op *)shared, *Ks = Qs + TILE * OP_LD, *Vs = Ks + TILE * OP_LD, *Ps = Vs + TILE * OP_LD;
    float *Ss = (float *)(Ps + TILE * P_LD), *Os = Ss + TILE * S_LD;
    int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale = rsqrtf((float)hs);

    load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
    for (int i = threadIdx.x; i < TILE * ACC_LD; i += blockDim.x) Os[i] = 0.0f;
    int r = LANE_ROW(lane), c0 = LANE_COLUMN0(lane), q = qt * TILE + warp * WARP_ROWS + r;
    float *Sw = Ss + warp * WARP_ROWS * S_LD, *Ow = Os + warp * WARP_ROWS * ACC_LD;
    Op *Pw = Ps + warp * WARP_ROWS * P_LD;
    float m = -INFINITY, l = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
        load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
        __syncthreads();
        warp_product<MATH, true>(Sw, S_LD, Qs + warp * WARP_ROWS * OP_LD, OP_LD, Ks, OP_LD, TILE, HEAD_PAD, 0);
        float *s = Sw + r * S_LD;
        float tile_max = -INFINITY;
        for (int c = c0; c < TILE; c += 2) {
            int k = kt * TILE + c;
            s[c] = k <= q && k < T ? s[c] * scale : -INFINITY;
            tile_max = fmaxf(tile_max, s[c]);
        }
        tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
        float m_new = fmaxf(m, tile_max);  // finite: key kt * TILE <= q is always in
        float rescale = expf(m - m_new), sum = 0.0f;
        for (int c = c0; c < TILE; c += 2) {
            float p = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
            sum += p;
            to_operand(&Pw[r * P_LD + c], p * dropout_factor(d, b, q, h, T, kt * TILE + c));
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        l = l * rescale + sum;
        m = m_new;
        for (int c = c0; c < HEAD_PAD; c += 2) Ow[r * ACC_LD + c] *= rescale;
        __syncwarp();
        warp_product<MATH, false>(Ow, ACC_LD, Pw, P_LD, Vs, OP_LD, HEAD_PAD, TILE, 1);
    }
    if (q >= T) return;
    float *o = out + ((size_t)b * T + q) * C + (size_t)h * hs;
    for (int c = c0; c < hs; c += 2) o[c] = Ow[r * ACC_LD + c] / l;
    if (c0 == 0) lse[(size_t)blockIdx.y * T + q] = m + logf(l);
}

// delta (B,NH,T) = the dot of each head's dout and out row.
__global__ static void attention_delta_kernel(float *delta, const float *dout, const float *out, int B, int T, int NH,
                                              int hs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // over (b, h, t)
    if (i >= (size_t)B * NH * T) return;
    int t = (int)(i % T), h = (int)(i / T % NH), b = (int)(i / T / NH);
    size_t at = ((size_t)b * T + t) * NH * hs + (size_t)h * hs;
    float dot = 0.0f;
    for (int c = 0; c < hs; c++) dot += dout[at + c] * out[at + c];
    delta[i] = dot;
}

// dK, dV of one key tile: dqkv's k and v parts, added. Grid (key tiles, B*NH).
// Each warp owns 16 keys and works on the transposed scores s^T (its keys, TILE queries).
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_backward_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                 const float *delta, Dropout drop, int dropping, int T, int NH, int hs) {
    typedef typename Operands<MATH>::type Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Ks = (Op *)shared, *Vs = Ks + TILE * OP_LD, *Qs = Vs + TILE * OP_LD, *dOs = Qs + TILE * OP_LD;
    Op *Ps = dOs + TILE * OP_LD;
    float *Ss = (float *)(Ps + TILE * P_LD), *dPs = Ss + TILE * S_LD, *dKs = dPs + TILE * S_LD;
    float *dVs = dKs + TILE * ACC_LD, *lse_s = dVs + TILE * ACC_LD, *delta_s = lse_s + TILE;
    int kt = blockIdx.x, nt = gridDim.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *dout_src = dout + (size_t)b * T * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale = rsqrtf((float)hs);

    load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
    load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
    for (int i = threadIdx.x; i < TILE * ACC_LD; i += blockDim.x) dKs[i] = dVs[i] = 0.0f;
    int r = LANE_ROW(lane), c0 = LANE_COLUMN0(lane), k = kt * TILE + warp * WARP_ROWS + r;
    float *Sw = Ss + warp * WARP_ROWS * S_LD, *dPw = dPs + warp * WARP_ROWS * S_LD;
    Op *Pw = Ps + warp * WARP_ROWS * P_LD;
    for (int qt = kt; qt < nt; qt++) {
        __syncthreads();
        load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
        load_tile(dOs, dout_src, qt * TILE, T, hs, C);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            int q = qt * TILE + i;
            lse_s[i] = q < T ? lse[(size_t)blockIdx.y * T + q] : 0.0f;
            delta_s[i] = q < T ? delta[(size_t)blockIdx.y * T + q] : 0.0f;
        }
        __syncthreads();
        warp_product<MATH, true>(Sw, S_LD, Ks + warp * WARP_ROWS * OP_LD, OP_LD, Qs, OP_LD, TILE, HEAD_PAD, 0);
        for (int c = c0; c < TILE; c += 2) {
            int q = qt * TILE + c;
            float p = q >= k && q < T && k < T ? expf(Sw[r * S_LD + c] * scale - lse_s[c]) : 0.0f;
            Sw[r * S_LD + c] = p;
            to_operand(&Pw[r * P_LD + c], p * dropout_factor(d, b, q, h, T, k));
        }
        __syncwarp();
        warp_product<MATH, false>(dVs + warp * WARP_ROWS * ACC_LD, ACC_LD, Pw, P_LD, dOs, OP_LD, HEAD_PAD, TILE, 1);
        warp_product<MATH, true>(dPw, S_LD, Vs + warp * WARP_ROWS * OP_LD, OP_LD, dOs, OP_LD, TILE, HEAD_PAD, 0);
        for (int c = c0; c < TILE; c += 2) {
            int q = qt * TILE + c;
            float p = Sw[r * S_LD + c];
            float dp = p == 0.0f ? 0.0f : dPw[r * S_LD + c] * dropout_factor(d, b, q, h, T, k);
            to_operand(&Pw[r * P_LD + c], p * (dp - delta_s[c]));
        }
        __syncwarp();
        warp_product<MATH, false>(dKs + warp * WARP_ROWS * ACC_LD, ACC_LD, Pw, P_LD, Qs, OP_LD, HEAD_PAD, TILE, 1);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TILE * HEAD_PAD; i += blockDim.x) {
        int row = i / HEAD_PAD, c = i % HEAD_PAD, key = kt * TILE + row;
        if (key >= T || c >= hs) continue;
        float *dk = dqkv + ((size_t)b * T + key) * 3 * C + C + (size_t)h * hs + c;
        dk[0] += scale * dKs[row * ACC_LD + c];
        dk[C] += dVs[row * ACC_LD + c];
    }
}

// dQ of one query tile: dqkv's q part, added. Grid (query tiles, B*NH).
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_backward_q_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                const float *delta, Dropout drop, int dropping, int T, int NH, int hs) {
    typedef typename Operands<MATH>::type Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Qs = (Op *)shared, *dOs = Qs + TILE * OP_LD, *Ks = dOs + TILE * OP_LD, *Vs = Ks + TILE * OP_LD;
    Op *dSs = Vs + TILE * OP_LD;
    float *Ss = (float *)(dSs + TILE * P_LD), *dPs = Ss + TILE * S_LD, *dQs = dPs + TILE * S_LD;
    int qt = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *dout_src = dout + (size_t)b * T * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale = rsqrtf((float)hs);

    load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
    load_tile(dOs, dout_src, qt * TILE, T, hs, C);
    for (int i = threadIdx.x; i < TILE * ACC_LD; i += blockDim.x) dQs[i] = 0.0f;
    int r = LANE_ROW(lane), c0 = LANE_COLUMN0(lane), q = qt * TILE + warp * WARP_ROWS + r;
    float row_lse = q < T ? lse[(size_t)blockIdx.y * T + q] : 0.0f;
    float row_delta = q < T ? delta[(size_t)blockIdx.y * T + q] : 0.0f;
    float *Sw = Ss + warp * WARP_ROWS * S_LD, *dPw = dPs + warp * WARP_ROWS * S_LD;
    Op *dSw = dSs + warp * WARP_ROWS * P_LD;
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
        load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
        __syncthreads();
        warp_product<MATH, true>(Sw, S_LD, Qs + warp * WARP_ROWS * OP_LD, OP_LD, Ks, OP_LD, TILE, HEAD_PAD, 0);
        warp_product<MATH, true>(dPw, S_LD, dOs + warp * WARP_ROWS * OP_LD, OP_LD, Vs, OP_LD, TILE, HEAD_PAD, 0);
        for (int c = c0; c < TILE; c += 2) {
            int k = kt * TILE + c;
            int in = k <= q && k < T && q < T;
            float p = in ? expf(Sw[r * S_LD + c] * scale - row_lse) : 0.0f;
            float dp = in ? dPw[r * S_LD + c] * dropout_factor(d, b, q, h, T, k) : 0.0f;
            to_operand(&dSw[r * P_LD + c], p * (dp - row_delta));
        }
        __syncwarp();
        warp_product<MATH, false>(dQs + warp * WARP_ROWS * ACC_LD, ACC_LD, dSw, P_LD, Ks, OP_LD, HEAD_PAD, TILE, 1);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TILE * HEAD_PAD; i += blockDim.x) {
        int row = i / HEAD_PAD, c = i % HEAD_PAD, query = qt * TILE + row;
        if (query >= T || c >= hs) continue;
        dqkv[((size_t)b * T + query) * 3 * C + (size_t)h * hs + c] += scale * dQs[row * ACC_LD + c];
    }
}

// Shared memory of each kernel, per arithmetic.
static size_t forward_shared(int op_bytes) {
    return (size_t)op_bytes * (3 * TILE * OP_LD + TILE * P_LD) + sizeof(float) * (TILE * S_LD + TILE * ACC_LD);
}
static size_t backward_kv_shared(int op_bytes) {
    return (size_t)op_bytes * (4 * TILE * OP_LD + TILE * P_LD) +
           sizeof(float) * (2 * TILE * S_LD + 2 * TILE * ACC_LD + 2 * TILE);
}
static size_t backward_q_shared(int op_bytes) {
    return (size_t)op_bytes * (4 * TILE * OP_LD + TILE * P_LD) + sizeof(float) * (2 * TILE * S_LD + TILE * ACC_LD);
}

template <int MATH>
static void launch_forward(float *out, float *lse, const float *qkv, const Dropout *drop, int B, int T, int C,
                           int NH) {
    size_t shared = forward_shared(sizeof(typename Operands<MATH>::type));
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)shared));
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    Dropout none = {0, 0, 0, 1.0f};
    attention_forward_kernel<MATH><<<grid, TILE_WARPS * 32, shared>>>(out, lse, qkv, drop ? *drop : none, drop != NULL,
                                                                       T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
}

template <int MATH>
static void launch_backward(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *delta,
                            const Dropout *drop, int B, int T, int C, int NH) {
    int op_bytes = sizeof(typename Operands<MATH>::type);
    size_t kv_shared = backward_kv_shared(op_bytes), q_shared = backward_q_shared(op_bytes);
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kv_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)kv_shared));
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_q_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)q_shared));
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    Dropout none = {0, 0, 0, 1.0f};
    attention_backward_kv_kernel<MATH><<<grid, TILE_WARPS * 32, kv_shared>>>(
        dqkv, dout, qkv, lse, delta, drop ? *drop : none, drop != NULL, T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
    attention_backward_q_kernel<MATH><<<grid, TILE_WARPS * 32, q_shared>>>(
        dqkv, dout, qkv, lse, delta, drop ? *drop : none, drop != NULL, T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
}

static void check_head_size(int C, int NH) {
    CHECK(C % NH == 0 && C / NH <= HEAD_PAD,
          "the GPU's attention takes heads of at most %d channels (C = %d, %d heads)", HEAD_PAD, C, NH);
}

extern "C" void attention_fused_forward_cuda(float *out, float *lse, const float *qkv, const Dropout *drop, int B,
                                             int T, int C, int NH, AttentionMath math) {
    check_head_size(C, NH);
    if (math == ATTENTION_BF16) launch_forward<ATTENTION_BF16>(out, lse, qkv, drop, B, T, C, NH);
    else if (math == ATTENTION_TF32) launch_forward<ATTENTION_TF32>(out, lse, qkv, drop, B, T, C, NH);
    else launch_forward<ATTENTION_FP32>(out, lse, qkv, drop, B, T, C, NH);
}

extern "C" void attention_fused_backward_cuda(float *dqkv, float *delta, const float *dout, const float *qkv,
                                              const float *out, const float *lse, const Dropout *drop, int B, int T,
                                              int C, int NH, AttentionMath math) {
    check_head_size(C, NH);
    size_t rows = (size_t)B * NH * T;
    attention_delta_kernel<<<device_blocks(rows, 256), 256>>>(delta, dout, out, B, T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
    if (math == ATTENTION_BF16) launch_backward<ATTENTION_BF16>(dqkv, dout, qkv, lse, delta, drop, B, T, C, NH);
    else if (math == ATTENTION_TF32) launch_backward<ATTENTION_TF32>(dqkv, dout, qkv, lse, delta, drop, B, T, C, NH);
    else launch_backward<ATTENTION_FP32>(dqkv, dout, qkv, lse, delta, drop, B, T, C, NH);
}
