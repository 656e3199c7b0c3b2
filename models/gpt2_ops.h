// gpt2_ops.h: the layers of GPT-2 on the CPU, forward and backward in matching
// pairs (the backward takes the forward's arguments plus the gradients).
// Shapes: B batch rows, T time steps, C channels, OC output channels,
// NH heads, V vocabulary, Vp padded vocabulary.
//
// Convention: every backward ADDS into the gradients it produces (+=), so a
// tensor used twice (the tied wte) or a gradient accumulated over units gets the
// sum. Callers zero gradient buffers before the first contribution.
//
// real_t is float in the library. The layer tests compile this file again with
// SHARDLAB_REAL_DOUBLE, so finite differences can be taken in double precision.
#ifndef SHARDLAB_GPT2_OPS_H
#define SHARDLAB_GPT2_OPS_H

#include "device/dtype.h"
#include "models/bf16_products.h"
#include "models/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef SHARDLAB_REAL_DOUBLE
typedef double real_t;
#else
typedef float real_t;
#endif

// C (M,N) = alpha op(A) op(B) + beta C, row-major, op(X) being X ('N') or X^T ('T'): every matrix product of the
// layers, on the engine models/products.c chooses for this CPU. A (M,K) after op, lda its row stride; B (K,N),
// ldb; C, ldc.
void product(char transa, char transb, int M, int N, int K, real_t alpha, const real_t *A, int lda, const real_t *B,
             int ldb, real_t beta, real_t *C, int ldc);
#ifndef SHARDLAB_REAL_DOUBLE
// The engine the products run on in this process (products.c's rule, or SHARDLAB_PRODUCTS): its name ("oneDNN",
// "OpenBLAS"), its kernels (oneDNN: the instruction set, which ONEDNN_MAX_CPU_ISA may cap; OpenBLAS: its core's,
// which OPENBLAS_CORETYPE may set), oneDNN's instruction set here (what the rule reads), what chose it ("the rule
// for this instruction set" or "SHARDLAB_PRODUCTS"), how its threads run ("openmp": the layers' own pool), and
// what multiplies bf16 operands ("oneDNN <its kernel>", or "widened to fp32, then <engine>").
typedef struct {
    const char *engine, *isa, *chosen_by, *parallel;
    char kernels[64], bf16_kernels[64];
} ProductEngine;
ProductEngine product_engine(void);
// Chooses the engine now, if no product has yet: a bad SHARDLAB_PRODUCTS or ONEDNN_MAX_CPU_ISA stops here.
void product_choose(void);
// The entry a product of these transpositions takes, with fp32 or bf16 operands: "oneDNN matmul" (the primitive),
// "oneDNN sgemm", "OpenBLAS sgemm", "oneDNN bf16 matmul", or "widened, " and the fp32 entry.
const char *product_route(char transa, char transb, DType operands);
// The engine's threads, where it keeps its own count (OpenBLAS); oneDNN follows the OpenMP pool's.
void product_set_threads(int threads);
// C (M,N) = op(A) op(B) + beta C with bf16 operands, accumulated in fp32 (as a GPU's tensor cores multiply), beta 0
// or 1: oneDNN's bf16 matmul where the CPU has bf16 instructions (AVX512-BF16, AMX), elsewhere the operands
// widened to fp32 (exactly) in tiles and multiplied by the fp32 engine. C is fp32, or bf16 (c_dtype): then each
// element's fp32 sum, plus C's own value with beta 1, is rounded once into it. Other arguments as product's.
void product_bf16(char transa, char transb, int M, int N, int K, const bf16 *A, int lda, const bf16 *B, int ldb,
                  float beta, void *C, DType c_dtype, int ldc);
#endif

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:], the tables of `dtype` (a bf16 run's as kept, read exactly).
void encoder_forward(real_t *out, const int *inp, const void *wte, const void *wpe, DType dtype, int B, int T,
                     int C);  // out (B,T,C), inp (B,T), wte (Vp,C), wpe (maxT,C)
// dwte[inp[b,t],:] += dout[b,t,:] and dwpe[t,:] += dout[b,t,:], the gradients of grad_dtype. fp32: each position's
// row added in turn. bf16: each token's rows (and each t's) summed in fp32 in position order from 0, the sum added
// and rounded once, as an fp32 copy of the gradient added back would give; positions_by_token (B*T), the batch's
// positions sorted by token, stably (gpt2_set_batch); unused (may be NULL) with fp32 gradients.
void encoder_backward(void *dwte, void *dwpe, DType grad_dtype, const real_t *dout, const int *inp,
                      const int *positions_by_token, int B, int T,
                      int C);  // dwte (Vp,C), dwpe (maxT,C), dout (B,T,C), inp (B,T)

// Normalizes each (b,t) row over C, then scales and shifts. mean and rstd are
// kept for the backward pass.
void layernorm_forward(real_t *out, real_t *mean, real_t *rstd, const real_t *inp,
                       const real_t *weight, const real_t *bias, int B, int T,
                       int C);  // out, inp (B,T,C); mean, rstd (B,T); weight, bias (C)
void layernorm_backward(real_t *dinp, real_t *dweight, real_t *dbias, const real_t *dout,
                        const real_t *inp, const real_t *weight, const real_t *mean,
                        const real_t *rstd, int B, int T, int C);

// out = inp @ weight^T + bias, through `product`; with products (a bf16 run; NULL: fp32) through product_bf16,
// weight then bf16 and dweight of products->grad_dtype (bf16_products.h); the bias's gradient sums dout in fp32.
// out (B,T,OC), inp (B,T,C), weight (OC,C), bias (OC) or NULL
void matmul_forward(real_t *out, const real_t *inp, const void *weight, const real_t *bias, int B, int T, int C,
                    int OC, const Bf16Products *products);
void matmul_backward(real_t *dinp, void *dweight, real_t *dbias, const real_t *dout, const real_t *inp,
                     const void *weight, int B, int T, int C, int OC, const Bf16Products *products);

// Causal self-attention on the packed qkv projection. att keeps the softmax
// probabilities for the backward pass; scratch holds B * NH * T * T values. With
// drop (NULL: none) the probabilities are dropped (element h*T + t2 of position
// t) on their way to multiply v; att keeps them whole, for the softmax's backward.
void attention_forward(real_t *out, real_t *att, const real_t *qkv, real_t *scratch, const Dropout *drop, int B,
                       int T, int C, int NH);  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C)
void attention_backward(real_t *dqkv, const real_t *dout, const real_t *qkv, const real_t *att,
                        real_t *scratch, const Dropout *drop, int B, int T, int C, int NH);

// out = in with drop's mask (B,T,C; element c of position t): kept values scaled
// by 1/(1-P), dropped ones 0. out may be in. Forward and backward alike: the
// gradient of a dropout is the same mask on the incoming gradient.
void dropout_apply(real_t *out, const real_t *in, const Dropout *drop, int B, int T, int C);

// GELU, tanh approximation.
// e^x as every element-wise loop here computes it (gpt2_ops.c): within 4 float
// ulps of e^x on [-87, 88], 0 below, e^88 above, NaN for NaN. For tests.
real_t exp_element(real_t x);
void gelu_forward(real_t *out, const real_t *inp, int N);
void gelu_backward(real_t *dinp, const real_t *inp, const real_t *dout, int N);

// out = a + b (the residual stream); its backward is the identity, done in place
// by the callers.
void residual_forward(real_t *out, const real_t *a, const real_t *b, int N);

// Softmax over the first V of Vp logits, then -log p(target). probs keeps the
// softmax for the backward pass; padded columns get probability 0.
void softmax_crossentropy_forward(real_t *losses, real_t *probs, const real_t *logits,
                                  const int *targets, int B, int T, int V,
                                  int Vp);  // losses (B,T), probs, logits (B,T,Vp)
// dlogits = dloss * (probs - onehot(target)); padded columns get 0. Overwrites
// dlogits (it is the first and only contribution), which may be probs itself.
void softmax_crossentropy_backward(real_t *dlogits, const real_t *probs, const int *targets,
                                   real_t dloss, int B, int T, int V, int Vp);
// The two in one pass, in place (--fused-classifier): losses as the forward's,
// and each row of logits overwritten by its dlogits, as the backward's, bit for
// bit, with no probabilities kept.
void softmax_crossentropy_fused(real_t *losses, real_t *logits, const int *targets, real_t dloss, int B, int T,
                                int V, int Vp);  // losses (B,T), logits (B,T,Vp) in, dlogits out

#ifdef __cplusplus
}
#endif

#endif
