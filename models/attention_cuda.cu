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
// dQ (and D) are summed by a block per query tile, then dK and dV by a block per
// key tile, so no two blocks add into one value and the result repeats bit for
// bit (no atomics). The products run on tensor cores (mma.sync, 16x8 tiles, fp32
// accumulation) and their results stay in registers: a warp's scores become the
// operand of its next product without a trip through memory. The operands are
// bf16 or TF32, or fp32 as three TF32 products (big*big + big*small + small*big,
// ATTENTION_FP32). With dropout, p_qk is dropped and scaled where it multiplies v
// (and so dp_qk where it flows back), with the CPU's masks: dropout.h's element
// h*T + k of position q.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "device/cuda_check.h"
#include "device/device_cuda.h"
#include "models/gpt2_cuda_ops.h"

#define TILE 64          // query or key rows a block holds
#define HEAD_PAD 64      // the head size, zero-padded in shared memory (hs <= HEAD_PAD)
#define TILE_WARPS 4     // each owns 16 rows of the tile
#define WARP_ROWS 16
#define N_TILES 8        // the 8-column accumulator tiles across TILE (or HEAD_PAD) columns
#define OP_LD (HEAD_PAD + 8)  // a tile's row stride in shared memory: no bank conflicts
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

// One tensor-core product of a warp, D (16, 8) += A (16, K_STEP) @ B (K_STEP, 8).
// Lane l holds, with g = l / 4 and t = l % 4, the accumulator elements
//   d[0], d[1]: row g,     columns 2t, 2t + 1
//   d[2], d[3]: row g + 8, columns 2t, 2t + 1
// A and B come from shared memory row-major (load_a, load_b), B also as the
// transpose of a row-major tile (load_b_transposed: B = M^T, for q . k), and A
// from two (bf16) or one (TF32) accumulator tiles (a_from_acc: scores become
// the operand that multiplies v). Each struct orders the K_STEP products of a
// step so that an accumulator's columns are its A's columns as they lie.
template <int MATH> struct Mma;

// bf16 (m16n8k16): registers hold pairs of consecutive k; a[0..3] are rows
// g, g + 8 at k = 2t, 2t + 1, then rows g, g + 8 at k = 2t + 8, 2t + 9.
template <> struct Mma<ATTENTION_BF16> {
    typedef __nv_bfloat16 op;
    enum { K_STEP = 16 };
    __device__ static uint32_t pair(const op *p) { return *(const uint32_t *)p; }
    __device__ static uint32_t pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *(uint32_t *)&v;
    }
    __device__ static void load_a(uint32_t a[4], const op *M, int ld) {
        int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        a[0] = pair(M + g * ld + 2 * t), a[1] = pair(M + (g + 8) * ld + 2 * t);
        a[2] = pair(M + g * ld + 2 * t + 8), a[3] = pair(M + (g + 8) * ld + 2 * t + 8);
    }
    __device__ static void load_b_transposed(uint32_t b[2], const op *M, int ld) {
        int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        b[0] = pair(M + g * ld + 2 * t), b[1] = pair(M + g * ld + 2 * t + 8);
    }
    // Lanes 0-15 name the 16 rows; .trans hands each lane its column's pairs.
    __device__ static void load_b(uint32_t b[2], const op *M, int ld) {
        uint32_t row = (uint32_t)__cvta_generic_to_shared(M + (threadIdx.x % 16) * ld);
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(b[0]), "=r"(b[1])
                     : "r"(row));
    }
    __device__ static void a_from_acc(uint32_t a[4], const float c[][4]) {
        a[0] = pack(c[0][0], c[0][1]), a[1] = pack(c[0][2], c[0][3]);
        a[2] = pack(c[1][0], c[1][1]), a[3] = pack(c[1][2], c[1][3]);
    }
    __device__ static void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

__device__ static inline uint32_t to_tf32(float x) {
    uint32_t y;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(y) : "f"(x));
    return y;
}

__device__ static inline void mma_tf32(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// fp32 operands (m16n8k8): the hardware's k slot t takes k = 2t and slot t + 4
// takes k = 2t + 1, the order in which an accumulator holds its columns. TF32
// rounds the operands as they are loaded; fp32 keeps them and splits each
// product in three.
template <bool THREE_PASSES> struct Tf32Mma {
    typedef float op;
    enum { K_STEP = 8 };
    __device__ static uint32_t operand(float x) { return THREE_PASSES ? __float_as_uint(x) : to_tf32(x); }
    __device__ static void load_a(uint32_t a[4], const op *M, int ld) {
        int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        a[0] = operand(M[g * ld + 2 * t]), a[1] = operand(M[(g + 8) * ld + 2 * t]);
        a[2] = operand(M[g * ld + 2 * t + 1]), a[3] = operand(M[(g + 8) * ld + 2 * t + 1]);
    }
    __device__ static void load_b_transposed(uint32_t b[2], const op *M, int ld) {
        int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        b[0] = operand(M[g * ld + 2 * t]), b[1] = operand(M[g * ld + 2 * t + 1]);
    }
    __device__ static void load_b(uint32_t b[2], const op *M, int ld) {
        int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
        b[0] = operand(M[2 * t * ld + g]), b[1] = operand(M[(2 * t + 1) * ld + g]);
    }
    __device__ static void a_from_acc(uint32_t a[4], const float c[][4]) {
        a[0] = operand(c[0][0]), a[1] = operand(c[0][2]), a[2] = operand(c[0][1]), a[3] = operand(c[0][3]);
    }
    // fp32: x = big + small with both TF32; the small*small term is below fp32's rounding.
    __device__ static void mma(float d[4], const uint32_t a[4], const uint32_t b[2]) {
        if constexpr (!THREE_PASSES) {
            mma_tf32(d, a, b);
        } else {
            uint32_t a_big[4], a_small[4], b_big[2], b_small[2];
        for (int i = 0; i < 4; i++) {
            a_big[i] = to_tf32(__uint_as_float(a[i]));
            a_small[i] = to_tf32(__uint_as_float(a[i]) - __uint_as_float(a_big[i]));
        }
        for (int i = 0; i < 2; i++) {
            b_big[i] = to_tf32(__uint_as_float(b[i]));
            b_small[i] = to_tf32(__uint_as_float(b[i]) - __uint_as_float(b_big[i]));
        }
        mma_tf32(d, a_small, b_big);
        mma_tf32(d, a_big, b_small);
        mma_tf32(d, a_big, b_big);
        }
    }
};
template <> struct Mma<ATTENTION_TF32> : Tf32Mma<false> {};
template <> struct Mma<ATTENTION_FP32> : Tf32Mma<true> {};

// acc (16, TILE) = A (16, HEAD_PAD) @ Bm^T, A rows of one warp, Bm (TILE, HEAD_PAD):
// the scores of 16 rows against a tile.
template <int MATH>
__device__ static void scores(float acc[N_TILES][4], const typename Mma<MATH>::op *A,
                              const typename Mma<MATH>::op *Bm) {
    typedef Mma<MATH> M;
#pragma unroll
    for (int j = 0; j < N_TILES; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < HEAD_PAD; k += M::K_STEP) {
        uint32_t a[4];
        M::load_a(a, A + k, OP_LD);
#pragma unroll
        for (int j = 0; j < N_TILES; j++) {
            uint32_t b[2];
            M::load_b_transposed(b, Bm + j * 8 * OP_LD + k, OP_LD);
            M::mma(acc[j], a, b);
        }
    }
}

// acc (16, HEAD_PAD) += P (16, TILE) @ Bm (TILE, HEAD_PAD), P in accumulator
// tiles, each element first multiplied by `factor` where bit 4j + e of `kept` is
// set and by 0 where not (dropout; all kept and factor 1 multiply by one).
template <int MATH>
__device__ static void accumulate(float acc[N_TILES][4], const float p[N_TILES][4], uint32_t kept, float factor,
                                  const typename Mma<MATH>::op *Bm) {
    typedef Mma<MATH> M;
    enum { STEP_TILES = M::K_STEP / 8 };
#pragma unroll
    for (int k = 0; k < TILE; k += M::K_STEP) {
        float x[STEP_TILES][4];
#pragma unroll
        for (int i = 0; i < STEP_TILES; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int bit = (k / 8 + i) * 4 + e;
                x[i][e] = p[k / 8 + i][e] * (kept >> bit & 1 ? factor : 0.0f);
            }
        uint32_t a[4];
        M::a_from_acc(a, x);
#pragma unroll
        for (int j = 0; j < N_TILES; j++) {
            uint32_t b[2];
            M::load_b(b, Bm + k * OP_LD + j * 8, OP_LD);
            M::mma(acc[j], a, b);
        }
    }
}

__device__ static inline void store4(float *dst, float4 v) { *(float4 *)dst = v; }
__device__ static inline void store4(__nv_bfloat16 *dst, float4 v) {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 both = make_uint2(*(uint32_t *)&lo, *(uint32_t *)&hi);
    *(uint2 *)dst = both;
}

// The whole block: TILE rows from row0 of a (T, hs) slice with row stride
// `stride` into dst (TILE, OP_LD), zeros past T and past hs; 16-byte loads
// where the slice's rows allow them.
template <class Op>
__device__ static void load_tile(Op *dst, const float *src, int row0, int T, int hs, size_t stride) {
    int vector = hs % 4 == 0 && stride % 4 == 0 && (uintptr_t)src % 16 == 0;
    int width = vector ? 4 : 1;
    for (int i = threadIdx.x; i < TILE * HEAD_PAD / width; i += blockDim.x) {
        int r = i / (HEAD_PAD / width), d = i % (HEAD_PAD / width) * width, t = row0 + r;
        const float *s = src + (size_t)t * stride + d;
        int in = t < T && d < hs;
        if (vector) {
            store4(&dst[r * OP_LD + d], in ? *(const float4 *)s : make_float4(0.0f, 0.0f, 0.0f, 0.0f));
        } else {
            float x = in ? *s : 0.0f;
            if constexpr (sizeof(Op) == 2) dst[r * OP_LD + d] = __float2bfloat16_rn(x);
            else dst[r * OP_LD + d] = x;
        }
    }
}

// Accumulator element e of tile j of lane l: its row in the warp's 16 and column.
#define ACC_ROW(e) (threadIdx.x % 32 / 4 + ((e) >= 2 ? 8 : 0))
#define ACC_COLUMN(j, e) ((j) * 8 + threadIdx.x % 4 * 2 + (e) % 2)

// The dropout bits of a lane's accumulator elements: bit 4j + e is element e of
// tile j, kept (1) or dropped. Rows and columns are (query, key) pairs, or
// (key, query) in the dK/dV kernel.
__device__ static uint32_t kept_bits(const Dropout *drop, int b, int h, int T, int row0, int column0,
                                     int rows_are_queries) {
    if (!drop) return 0xffffffffu;
    uint32_t kept = 0;
#pragma unroll
    for (int j = 0; j < N_TILES; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + ACC_ROW(e), column = column0 + ACC_COLUMN(j, e);
            int q = rows_are_queries ? row : column, k = rows_are_queries ? column : row;
            kept |= (uint32_t)dropout_keep(drop, dropout_row_key(drop, b, q), (uint64_t)h * T + k) << (j * 4 + e);
        }
    return kept;
}

// out (B,T,C), lse (B,NH,T) <- qkv (B,T,3C). Grid (query tiles, B*NH), TILE_WARPS warps.
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_forward_kernel(float *out, float *lse, const float *qkv, Dropout drop, int dropping, int T, int NH,
                             int hs) {
    typedef typename Mma<MATH>::op Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Qs = (Op *)shared, *Ks = Qs + TILE * OP_LD, *Vs = Ks + TILE * OP_LD;
    int qt = gridDim.x - 1 - blockIdx.x;  // the longest rows first
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale2 = rsqrtf((float)hs) * LOG2E;  // scores in base 2: exp(x) = exp2(x log2 e)
    int row0 = qt * TILE + warp * WARP_ROWS;

    load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
    float o[N_TILES][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, s[N_TILES][4];
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
        load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
        __syncthreads();
        scores<MATH>(s, Qs + warp * WARP_ROWS * OP_LD, Ks);
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int q = row0 + ACC_ROW(e), k = kt * TILE + ACC_COLUMN(j, e);
                s[j][e] = k <= q && k < T ? s[j][e] * scale2 : -INFINITY;
                tile_max[e / 2] = fmaxf(tile_max[e / 2], s[j][e]);
            }
        float rescale[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {  // a row's 4 lanes agree on its max
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 1));
            tile_max[i] = fmaxf(tile_max[i], __shfl_xor_sync(0xffffffffu, tile_max[i], 2));
            float m_new = fmaxf(m[i], tile_max[i]);  // finite: key kt * TILE <= q is always in
            rescale[i] = exp2f(m[i] - m_new);
            m[i] = m_new;
            l[i] *= rescale[i];
        }
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                s[j][e] = exp2f(s[j][e] - m[e / 2]);
                l[e / 2] += s[j][e];
                o[j][e] *= rescale[e / 2];
            }
        uint32_t kept = kept_bits(d, b, h, T, row0, kt * TILE, 1);
        accumulate<MATH>(o, s, kept, d ? d->scale : 1.0f, Vs);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {  // each lane summed its own columns
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int q = row0 + ACC_ROW(e);
        if (q >= T) continue;
        float *o_row = out + ((size_t)b * T + q) * C + (size_t)h * hs;
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
            if (ACC_COLUMN(j, e) < hs) o_row[ACC_COLUMN(j, e)] = o[j][e] / l[e / 2];
        if (e % 2 == 0 && threadIdx.x % 4 == 0) lse[(size_t)blockIdx.y * T + q] = (m[e / 2] + log2f(l[e / 2])) * LN2;
    }
}

// dQ of one query tile: dqkv's q part, added; and delta (B,NH,T) of its rows,
// D_q = dout_q . out_q, for the dK/dV kernel after it. Grid (query tiles, B*NH).
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_backward_q_kernel(float *dqkv, float *delta, const float *dout, const float *qkv, const float *out,
                                const float *lse, Dropout drop, int dropping, int T, int NH, int hs) {
    typedef typename Mma<MATH>::op Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Qs = (Op *)shared, *dOs = Qs + TILE * OP_LD, *Ks = dOs + TILE * OP_LD, *Vs = Ks + TILE * OP_LD;
    float *delta_s = (float *)(Vs + TILE * OP_LD);
    int qt = gridDim.x - 1 - blockIdx.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *dout_src = dout + (size_t)b * T * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale = rsqrtf((float)hs), scale2 = scale * LOG2E;
    int row0 = qt * TILE + warp * WARP_ROWS;

    load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
    load_tile(dOs, dout_src, qt * TILE, T, hs, C);
    for (int r = 0; r < WARP_ROWS; r++) {  // the warp's rows' D, a lane per column
        int q = row0 + r;
        size_t at = ((size_t)b * T + q) * C + (size_t)h * hs;
        float dot = 0.0f;
        for (int c = lane; c < hs && q < T; c += 32) dot += dout[at + c] * out[at + c];
        for (int step = 16; step >= 1; step /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, step);
        if (lane == 0) delta_s[warp * WARP_ROWS + r] = dot;
        if (lane == 0 && q < T) delta[(size_t)blockIdx.y * T + q] = dot;
    }
    __syncwarp();
    float row_lse2[2], row_delta[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int q = row0 + ACC_ROW(2 * i);
        row_lse2[i] = q < T ? lse[(size_t)blockIdx.y * T + q] * LOG2E : 0.0f;
        row_delta[i] = delta_s[warp * WARP_ROWS + ACC_ROW(2 * i)];
    }
    float dq[N_TILES][4] = {}, s[N_TILES][4], dp[N_TILES][4];
    for (int kt = 0; kt <= qt; kt++) {
        __syncthreads();
        load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
        load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
        __syncthreads();
        scores<MATH>(s, Qs + warp * WARP_ROWS * OP_LD, Ks);
        scores<MATH>(dp, dOs + warp * WARP_ROWS * OP_LD, Vs);
        uint32_t kept = kept_bits(d, b, h, T, row0, kt * TILE, 1);
        float factor = d ? d->scale : 1.0f;
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int q = row0 + ACC_ROW(e), k = kt * TILE + ACC_COLUMN(j, e);
                int in = k <= q && k < T && q < T;
                float p = in ? exp2f(s[j][e] * scale2 - row_lse2[e / 2]) : 0.0f;
                float dpv = in && (kept >> (j * 4 + e) & 1) ? dp[j][e] * factor : 0.0f;
                s[j][e] = p * (dpv - row_delta[e / 2]);  // ds
            }
        accumulate<MATH>(dq, s, 0xffffffffu, 1.0f, Ks);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int q = row0 + ACC_ROW(e);
        if (q >= T) continue;
        float *dq_row = dqkv + ((size_t)b * T + q) * 3 * C + (size_t)h * hs;
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
            if (ACC_COLUMN(j, e) < hs) dq_row[ACC_COLUMN(j, e)] += scale * dq[j][e];
    }
}

// dK, dV of one key tile: dqkv's k and v parts, added. Grid (key tiles, B*NH).
// Each warp owns 16 keys and works on the transposed scores s^T (its keys, TILE queries).
template <int MATH>
__global__ static void __launch_bounds__(TILE_WARPS * 32)
    attention_backward_kv_kernel(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                 const float *delta, Dropout drop, int dropping, int T, int NH, int hs) {
    typedef typename Mma<MATH>::op Op;
    extern __shared__ __align__(128) unsigned char shared[];
    Op *Ks = (Op *)shared, *Vs = Ks + TILE * OP_LD, *Qs = Vs + TILE * OP_LD, *dOs = Qs + TILE * OP_LD;
    float *lse2_s = (float *)(dOs + TILE * OP_LD), *delta_s = lse2_s + TILE;
    int kt = blockIdx.x, nt = gridDim.x;
    int b = blockIdx.y / NH, h = blockIdx.y % NH, warp = threadIdx.x / 32;
    size_t C = (size_t)NH * hs;
    const float *q_src = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
    const float *dout_src = dout + (size_t)b * T * C + (size_t)h * hs;
    const Dropout *d = dropping ? &drop : NULL;
    float scale = rsqrtf((float)hs), scale2 = scale * LOG2E;
    int row0 = kt * TILE + warp * WARP_ROWS;

    load_tile(Ks, q_src + C, kt * TILE, T, hs, 3 * C);
    load_tile(Vs, q_src + 2 * C, kt * TILE, T, hs, 3 * C);
    float dk[N_TILES][4] = {}, dv[N_TILES][4] = {}, s[N_TILES][4], dp[N_TILES][4];
    for (int qt = kt; qt < nt; qt++) {
        __syncthreads();
        load_tile(Qs, q_src, qt * TILE, T, hs, 3 * C);
        load_tile(dOs, dout_src, qt * TILE, T, hs, C);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            int q = qt * TILE + i;
            lse2_s[i] = q < T ? lse[(size_t)blockIdx.y * T + q] * LOG2E : 0.0f;
            delta_s[i] = q < T ? delta[(size_t)blockIdx.y * T + q] : 0.0f;
        }
        __syncthreads();
        scores<MATH>(s, Ks + warp * WARP_ROWS * OP_LD, Qs);  // s^T
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int k = row0 + ACC_ROW(e), c = ACC_COLUMN(j, e), q = qt * TILE + c;
                s[j][e] = q >= k && q < T && k < T ? exp2f(s[j][e] * scale2 - lse2_s[c]) : 0.0f;  // p^T
            }
        uint32_t kept = kept_bits(d, b, h, T, row0, qt * TILE, 0);
        float factor = d ? d->scale : 1.0f;
        accumulate<MATH>(dv, s, kept, factor, dOs);
        scores<MATH>(dp, Vs + warp * WARP_ROWS * OP_LD, dOs);  // dp^T
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float dpv = kept >> (j * 4 + e) & 1 ? dp[j][e] * factor : 0.0f;
                s[j][e] = s[j][e] * (dpv - delta_s[ACC_COLUMN(j, e)]);  // ds^T
            }
        accumulate<MATH>(dk, s, 0xffffffffu, 1.0f, Qs);
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int k = row0 + ACC_ROW(e);
        if (k >= T) continue;
        float *dk_row = dqkv + ((size_t)b * T + k) * 3 * C + C + (size_t)h * hs, *dv_row = dk_row + C;
#pragma unroll
        for (int j = 0; j < N_TILES; j++)
            if (ACC_COLUMN(j, e) < hs) {
                dk_row[ACC_COLUMN(j, e)] += scale * dk[j][e];
                dv_row[ACC_COLUMN(j, e)] += dv[j][e];
            }
    }
}

// Shared memory of each kernel, per operand size.
static size_t forward_shared(int op_bytes) { return (size_t)op_bytes * 3 * TILE * OP_LD; }
static size_t backward_q_shared(int op_bytes) {
    return (size_t)op_bytes * 4 * TILE * OP_LD + sizeof(float) * TILE;
}
static size_t backward_kv_shared(int op_bytes) {
    return (size_t)op_bytes * 4 * TILE * OP_LD + sizeof(float) * 2 * TILE;
}

template <int MATH>
static void launch_forward(float *out, float *lse, const float *qkv, const Dropout *drop, int B, int T, int C,
                           int NH) {
    size_t shared = forward_shared(sizeof(typename Mma<MATH>::op));
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)shared));
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    Dropout none = {0, 0, 0, 1.0f};
    attention_forward_kernel<MATH><<<grid, TILE_WARPS * 32, shared>>>(out, lse, qkv, drop ? *drop : none, drop != NULL,
                                                                       T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
}

template <int MATH>
static void launch_backward(float *dqkv, float *delta, const float *dout, const float *qkv, const float *out,
                            const float *lse, const Dropout *drop, int B, int T, int C, int NH) {
    int op_bytes = sizeof(typename Mma<MATH>::op);
    size_t q_shared = backward_q_shared(op_bytes), kv_shared = backward_kv_shared(op_bytes);
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_q_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)q_shared));
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kv_kernel<MATH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    (int)kv_shared));
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    Dropout none = {0, 0, 0, 1.0f};
    attention_backward_q_kernel<MATH><<<grid, TILE_WARPS * 32, q_shared>>>(
        dqkv, delta, dout, qkv, out, lse, drop ? *drop : none, drop != NULL, T, NH, C / NH);
    CUDA_CHECK_LAUNCH();
    attention_backward_kv_kernel<MATH><<<grid, TILE_WARPS * 32, kv_shared>>>(
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
    if (math == ATTENTION_BF16) launch_backward<ATTENTION_BF16>(dqkv, delta, dout, qkv, out, lse, drop, B, T, C, NH);
    else if (math == ATTENTION_TF32)
        launch_backward<ATTENTION_TF32>(dqkv, delta, dout, qkv, out, lse, drop, B, T, C, NH);
    else launch_backward<ATTENTION_FP32>(dqkv, delta, dout, qkv, out, lse, drop, B, T, C, NH);
}
