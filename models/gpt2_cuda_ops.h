// gpt2_cuda_ops.h: GPT-2's layers as CUDA kernels, with the same arguments and
// the same meaning as gpt2_ops.h (every backward adds into its gradients), on
// device pointers, queued on the compute stream. Matrix products go through
// cuBLAS. Where a layer is fused with its neighbour the name says so. Two
// backwards may instead write their dinp (DinpMode), where nothing else adds
// into it: the unit then neither zeroes the buffer first nor reads it back.
#ifndef SHARDLAB_GPT2_CUDA_OPS_H
#define SHARDLAB_GPT2_CUDA_OPS_H

#include <stddef.h>

#include "device/dtype.h"
#include "models/bf16_products.h"
#include "models/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

// As the CPU's (gpt2_ops.h): the tables of `dtype`, their gradients of grad_dtype, into which each token's (each
// t's) fp32 sum is added, rounded once where they are bf16. positions_by_token: (B*T) the positions sorted by
// token id (gpt2_set_batch makes it).
void encoder_forward_cuda(float *out, const int *inp, const void *wte, const void *wpe, DType dtype, int B, int T,
                          int C);
void encoder_backward_cuda(void *dwte, void *dwpe, DType grad_dtype, const float *dout, const int *inp,
                           const int *positions_by_token, int B, int T, int C);
void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C);
void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                             const float *weight, const float *mean, const float *rstd, int B, int T, int C);
// residual = a + b, then out = layernorm(residual): one pass over the row.
void residual_layernorm_forward_cuda(float *residual, float *out, float *mean, float *rstd, const float *a,
                                     const float *b, const float *weight, const float *bias, int B, int T, int C);
// The products take `products`: NULL multiplies in fp32 (TF32 where cuBLAS is
// allowed to); otherwise a bf16 run's (models/bf16_products.h): the weight bf16
// as kept, the activations rounded to bf16 into products->operands, multiplied on
// bf16 tensor cores with fp32 accumulation, and the weight's gradient added into
// the run's gradients as kept (products->grad_dtype).
typedef enum { DINP_ADD, DINP_WRITE } DinpMode;  // dinp += the gradient, or dinp = it
void matmul_forward_cuda(float *out, const float *inp, const void *weight, const float *bias, int B, int T, int C,
                         int OC, const Bf16Products *products);
void matmul_backward_cuda(float *dinp, void *dweight, float *dbias, const float *dout, const float *inp,
                          const void *weight, int B, int T, int C, int OC, DinpMode mode,
                          const Bf16Products *products);
// pre = inp @ weight^T + bias, out = gelu(pre): the bias add and GELU in one pass
// (bf16 operands: in the product's cuBLASLt epilogue, as matmul_forward_cuda's bias).
void matmul_bias_gelu_forward_cuda(float *pre, float *out, const float *inp, const void *weight, const float *bias,
                                   int B, int T, int C, int OC, const Bf16Products *products);
// The attentions' arithmetic: fp32 (TF32 where cuBLAS may use it), or bf16.
typedef enum { ATTENTION_FP32, ATTENTION_TF32, ATTENTION_BF16 } AttentionMath;
// scratch: (3,B,T,C) for the head-major q, k, v, plus (B,T,C) for the output.
// With drop (NULL: none), the probabilities are dropped into `dropped` (B,NH,T,T)
// to multiply v; att keeps them whole (gpt2_ops.h's attention_forward). With
// ATTENTION_BF16 (as llm.c): q, k, v, the scores, the probabilities and every
// product's result are bf16, each buffer holding bf16 elements from its start
// (att: the first half of its bytes); softmax and its backward compute in fp32.
void attention_forward_cuda(float *out, float *att, const float *qkv, float *scratch, float *dropped,
                            const Dropout *drop, int B, int T, int C, int NH, AttentionMath math);
// scratch: (4,B,T,C) for q, k, v and dout head-major; dscratch: (3,B,T,C);
// datt: (B,NH,T,T). math as the forward's.
void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *att, float *scratch,
                             float *dscratch, float *datt, const Dropout *drop, int B, int T, int C, int NH,
                             AttentionMath math);
// The fused attention (attention_cuda.cu): causal, flash-style, no (T,T) matrix
// in memory. Its products run with the operands `math` says, accumulating in fp32.
// out (B,T,C) and lse (B,NH,T), each row's log-sum-exp of scores, from qkv
// (B,T,3C); with drop (NULL: none), the probabilities that multiply v are dropped
// with the CPU's masks (gpt2_ops.h's attention_forward). Heads of at most 64 channels.
void attention_fused_forward_cuda(float *out, float *lse, const float *qkv, const Dropout *drop, int B, int T, int C,
                                  int NH, AttentionMath math);
// dqkv (B,T,3C) += the gradient through the attention, given its dout, qkv, out
// and lse; delta (B,NH,T) is scratch.
void attention_fused_backward_cuda(float *dqkv, float *delta, const float *dout, const float *qkv, const float *out,
                                   const float *lse, const Dropout *drop, int B, int T, int C, int NH,
                                   AttentionMath math);
// out = in with drop's mask (gpt2_ops.h's dropout_apply): bit for bit the CPU's.
void dropout_apply_cuda(float *out, const float *in, const Dropout *drop, int B, int T, int C);
void gelu_forward_cuda(float *out, const float *inp, int N);
void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, int N, DinpMode mode);
void residual_forward_cuda(float *out, const float *a, const float *b, int N);
void softmax_crossentropy_forward_cuda(float *losses, float *probs, const float *logits, const int *targets, int B,
                                       int T, int V, int Vp);
void softmax_crossentropy_backward_cuda(float *dlogits, const float *probs, const int *targets, float dloss, int B,
                                        int T, int V, int Vp);
// The two above in one pass (gpt2_ops.h's softmax_crossentropy_fused): losses,
// and logits overwritten by dlogits.
void softmax_crossentropy_fused_cuda(float *losses, float *logits, const int *targets, float dloss, int B, int T,
                                     int V, int Vp);

#ifdef __cplusplus
}
#endif

#endif
