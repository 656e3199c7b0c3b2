// gpt2_cuda.cu: the forward and backward of each unit on a GPU, the same steps
// as gpt2_cpu.c with the layers of gpt2_cuda_ops.cu, two of them fused (bias +
// GELU, residual + layernorm), and with --fused-attention the attention of
// attention_cuda.cu, which keeps a log-sum-exp per row where the other keeps
// the probabilities. Every buffer is device memory; the attention that keeps
// its probabilities borrows backward scratch buffers that are free at the moment.
#include <stdlib.h>
#include <string.h>

#include "device/cuda_check.h"
#include "device/device.h"
#include "models/gpt2.h"
#include "models/gpt2_cuda_ops.h"

// As gpt2_cpu.c's: P and G in fp32, W and DW a product's weight or an embedding
// table and its gradient as the ops take them (bf16 as kept in a bf16 run:
// gpt2_kept_param).
#define P(kind, l) model->unit_params[gpt2_tensor_id(&model->layout, (kind), (l))]
#define G(kind, l) model->unit_grads[gpt2_tensor_id(&model->layout, (kind), (l))]
#define W(kind, l) gpt2_kept_param(model, gpt2_tensor_id(&model->layout, (kind), (l)))
#define DW(kind, l) gpt2_kept_grad(model, gpt2_tensor_id(&model->layout, (kind), (l)))

// Runs one op call. With model->op_times set (bench_gpu) it also adds the GPU
// time between events recorded before and after it to op_times->forward_s[op]
// or ->backward_s[op] (`pass`), waiting for the second: ops then run one by one.
#define TIMED(pass, op, call)                                                   \
    do {                                                                        \
        if (!model->op_times) { call; break; }                                  \
        cudaEvent_t start_ = op_timer_start();                                  \
        call;                                                                   \
        model->op_times->pass[op] += op_timer_stop(start_);                     \
    } while (0)

static cudaEvent_t op_timer_start(void) {
    cudaEvent_t start;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventRecord(start, 0));
    return start;
}

// Seconds since `start`, once the work queued since has run.
static double op_timer_stop(cudaEvent_t start) {
    cudaEvent_t stop;
    float ms;
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(stop, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / 1e3;
}

int gpt2_device_fuses_attention(void) { return 1; }
int gpt2_device_sums_by_token(const GPT2 *model) { return (void)model, 1; }  // the embedding backward sums each token's positions (wte_backward_kernel)

// The attention's products: bf16 operands in a bf16 run; in fp32, TF32 where
// cuBLAS may use it too, plain fp32 with NVIDIA_TF32_OVERRIDE=0 (as cuBLAS).
static AttentionMath attention_math(const GPT2 *model) {
    if (model->param_dtype == DTYPE_BF16) return ATTENTION_BF16;
    const char *tf32 = getenv("NVIDIA_TF32_OVERRIDE");
    return tf32 && strcmp(tf32, "0") == 0 ? ATTENTION_FP32 : ATTENTION_TF32;
}

static void block_forward(GPT2 *model, int l, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, NH = c->num_heads;
    GPT2BlockActs x = gpt2_block_acts(model, l);
    GPT2Activations *a = &model->acts;
    size_t BTC = (size_t)B * T * C;
    Dropout sites[3];  // --dropout: the attention probabilities, each residual branch's output (NULL: none)
    const Dropout *att_drop = gpt2_dropout(model, l, DROPOUT_ATTENTION, &sites[0]);
    const Dropout *attproj_drop = gpt2_dropout(model, l, DROPOUT_ATTPROJ, &sites[1]);
    const Dropout *fcproj_drop = gpt2_dropout(model, l, DROPOUT_FCPROJ, &sites[2]);

    TIMED(forward_s, GPT2_OP_LAYERNORM, layernorm_forward_cuda(x.ln1, x.ln1_mean, x.ln1_rstd, x.residual,
                                                               P(GPT2_LN1W, l), P(GPT2_LN1B, l), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_QKV,
          matmul_forward_cuda(x.qkv, x.ln1, W(GPT2_QKVW, l), P(GPT2_QKVB, l), B, T, C, 3 * C, products));
    if (model->attention == ATTENTION_KEEPS_LOGSUMEXP)
        TIMED(forward_s, GPT2_OP_ATTENTION,
              attention_fused_forward_cuda(x.atty, x.att_lse, x.qkv, att_drop, B, T, C, NH, attention_math(model)));
    else  // scratch: dfch_gelu (4BTC) and att_scratch are free during the forward pass
        TIMED(forward_s, GPT2_OP_ATTENTION, attention_forward_cuda(x.atty, x.att, x.qkv, a->dfch_gelu, a->att_scratch,
                                                                   att_drop, B, T, C, NH, attention_math(model)));
    TIMED(forward_s, GPT2_OP_MATMUL_ATTPROJ, matmul_forward_cuda(x.attproj, x.atty, W(GPT2_ATTPROJW, l),
                                                                 P(GPT2_ATTPROJB, l), B, T, C, C, products));
    if (attproj_drop)
        TIMED(forward_s, GPT2_OP_RESIDUAL, dropout_apply_cuda(x.attproj, x.attproj, attproj_drop, B, T, C));
    TIMED(forward_s, GPT2_OP_LAYERNORM,
          residual_layernorm_forward_cuda(x.residual2, x.ln2, x.ln2_mean, x.ln2_rstd, x.residual, x.attproj,
                                          P(GPT2_LN2W, l), P(GPT2_LN2B, l), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_FC, matmul_bias_gelu_forward_cuda(x.fch, x.fch_gelu, x.ln2, W(GPT2_FCW, l),
                                                                       P(GPT2_FCB, l), B, T, C, 4 * C, products));
    TIMED(forward_s, GPT2_OP_MATMUL_FCPROJ, matmul_forward_cuda(x.fcproj, x.fch_gelu, W(GPT2_FCPROJW, l),
                                                                P(GPT2_FCPROJB, l), B, T, 4 * C, C, products));
    if (fcproj_drop)
        TIMED(forward_s, GPT2_OP_RESIDUAL, dropout_apply_cuda(x.fcproj, x.fcproj, fcproj_drop, B, T, C));
    TIMED(forward_s, GPT2_OP_RESIDUAL, residual_forward_cuda(x.residual3, x.residual2, x.fcproj, (int)BTC));
}

// a->dresidual holds d(residual3) on entry and d(block input) on return; with
// --dropout a residual branch gets it through the branch's mask, made in dln.
static void block_backward(GPT2 *model, int l, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, NH = c->num_heads;
    GPT2BlockActs x = gpt2_block_acts(model, l);
    GPT2Activations *a = &model->acts;
    size_t BTC = (size_t)B * T * C;
    Dropout sites[3];
    const Dropout *att_drop = gpt2_dropout(model, l, DROPOUT_ATTENTION, &sites[0]);
    const Dropout *attproj_drop = gpt2_dropout(model, l, DROPOUT_ATTPROJ, &sites[1]);
    const Dropout *fcproj_drop = gpt2_dropout(model, l, DROPOUT_FCPROJ, &sites[2]);

    // Each product's dinp and GELU's are the buffer's only contribution: written,
    // not added, so no buffer is zeroed first (DINP_WRITE).
    const float *dbranch = a->dresidual;  // d(fcproj)
    if (fcproj_drop) {
        TIMED(backward_s, GPT2_OP_RESIDUAL, dropout_apply_cuda(a->dln, a->dresidual, fcproj_drop, B, T, C));
        dbranch = a->dln;
    }
    TIMED(backward_s, GPT2_OP_MATMUL_FCPROJ,
          matmul_backward_cuda(a->dfch_gelu, DW(GPT2_FCPROJW, l), G(GPT2_FCPROJB, l), dbranch, x.fch_gelu,
                               W(GPT2_FCPROJW, l), B, T, 4 * C, C, DINP_WRITE, products));
    TIMED(backward_s, GPT2_OP_GELU, gelu_backward_cuda(a->dfch, x.fch, a->dfch_gelu, (int)(4 * BTC), DINP_WRITE));
    TIMED(backward_s, GPT2_OP_MATMUL_FC, matmul_backward_cuda(a->dln, DW(GPT2_FCW, l), G(GPT2_FCB, l), a->dfch, x.ln2,
                                                              W(GPT2_FCW, l), B, T, C, 4 * C, DINP_WRITE, products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward_cuda(a->dresidual, G(GPT2_LN2W, l), G(GPT2_LN2B, l), a->dln, x.residual2,
                                  P(GPT2_LN2W, l), x.ln2_mean, x.ln2_rstd, B, T, C));

    device_zero(a->dqkv, 3 * BTC);  // the attentions add into it
    dbranch = a->dresidual;  // d(attproj)
    if (attproj_drop) {
        TIMED(backward_s, GPT2_OP_RESIDUAL, dropout_apply_cuda(a->dln, a->dresidual, attproj_drop, B, T, C));
        dbranch = a->dln;
    }
    TIMED(backward_s, GPT2_OP_MATMUL_ATTPROJ,
          matmul_backward_cuda(a->datty, DW(GPT2_ATTPROJW, l), G(GPT2_ATTPROJB, l), dbranch, x.atty,
                               W(GPT2_ATTPROJW, l), B, T, C, C, DINP_WRITE, products));
    if (model->attention == ATTENTION_KEEPS_LOGSUMEXP)
        TIMED(backward_s, GPT2_OP_ATTENTION,
              attention_fused_backward_cuda(a->dqkv, a->att_delta, a->datty, x.qkv, x.atty, x.att_lse, att_drop, B,
                                            T, C, NH, attention_math(model)));
    else  // the MLP's gradient buffers are done with: they serve as the attention's scratch
        TIMED(backward_s, GPT2_OP_ATTENTION,
              attention_backward_cuda(a->dqkv, a->datty, x.qkv, x.att, a->dfch_gelu, a->dfch, a->att_scratch,
                                      att_drop, B, T, C, NH, attention_math(model)));
    TIMED(backward_s, GPT2_OP_MATMUL_QKV, matmul_backward_cuda(a->dln, DW(GPT2_QKVW, l), G(GPT2_QKVB, l), a->dqkv,
                                                               x.ln1, W(GPT2_QKVW, l), B, T, C, 3 * C, DINP_WRITE,
                                                               products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward_cuda(a->dresidual, G(GPT2_LN1W, l), G(GPT2_LN1B, l), a->dln, x.residual,
                                  P(GPT2_LN1W, l), x.ln1_mean, x.ln1_rstd, B, T, C));
}

static void head_forward(GPT2 *model, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    TIMED(forward_s, GPT2_OP_LAYERNORM, layernorm_forward_cuda(a->lnf, a->lnf_mean, a->lnf_rstd, residual,
                                                               P(GPT2_LNFW, 0), P(GPT2_LNFB, 0), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_LM_HEAD, matmul_forward_cuda(a->logits, a->lnf, W(GPT2_WTE, 0), NULL, B, T, C,
                                                                 c->padded_vocab_size, products));
    if (!model->targets) return;
    if (model->classifier == CLASSIFIER_FUSED)  // the backward's part now: logits become dlogits
        TIMED(forward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_fused_cuda(a->losses, a->logits, model->targets, gpt2_dloss(model), B, T,
                                              c->vocab_size, c->padded_vocab_size));
    else
        TIMED(forward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_forward_cuda(a->losses, a->probs, a->logits, model->targets, B, T, c->vocab_size,
                                                c->padded_vocab_size));
    // the mean loss is the one number the host needs each step
    size_t n = (size_t)B * T;
    float *losses = (float *)xmalloc(n * sizeof(float));
    device_to_host(losses, a->losses, n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += losses[i];
    free(losses);
    model->mean_loss = (float)(sum / (double)n);
}

static void head_backward(GPT2 *model, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    CHECK(model->targets, "backward needs targets");
    if (model->classifier == CLASSIFIER_KEEPS_PROBABILITIES)  // fused: the forward made dlogits
        TIMED(backward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_backward_cuda(a->logits, a->probs, model->targets, gpt2_dloss(model), B, T,
                                                 c->vocab_size, c->padded_vocab_size));
    device_zero(a->dresidual, (size_t)B * T * C);  // the layernorm's backward adds into it
    TIMED(backward_s, GPT2_OP_MATMUL_LM_HEAD, matmul_backward_cuda(a->dln, DW(GPT2_WTE, 0), NULL, a->logits, a->lnf,
                                                                   W(GPT2_WTE, 0), B, T, C, c->padded_vocab_size,
                                                                   DINP_WRITE, products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward_cuda(a->dresidual, G(GPT2_LNFW, 0), G(GPT2_LNFB, 0), a->dln, residual, P(GPT2_LNFW, 0),
                                  a->lnf_mean, a->lnf_rstd, B, T, C));
}

extern "C" void gpt2_device_forward(GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    int first = model->layout.unit_first_layer[unit], blocks = model->layout.unit_num_layers[unit];
    CHECK(model->inputs, "forward before gpt2_set_batch");
    Bf16Products bf16_run;
    const Bf16Products *products = gpt2_open_products(model, unit, 0, &bf16_run);
    Dropout site;
    const Dropout *drop = gpt2_dropout(model, 0, DROPOUT_EMBEDDING, &site);
    if (unit == 0) {
        TIMED(forward_s, GPT2_OP_ENCODER, encoder_forward_cuda(model->acts.encoded, model->inputs, W(GPT2_WTE, 0),
                                                               W(GPT2_WPE, 0), model->param_dtype, model->B,
                                                               model->T, c->channels));
        if (drop)
            TIMED(forward_s, GPT2_OP_ENCODER, dropout_apply_cuda(model->acts.encoded, model->acts.encoded, drop,
                                                                 model->B, model->T, c->channels));
    } else if (blocks > 0) {
        for (int l = first; l < first + blocks; l++) block_forward(model, l, products);
    } else {
        head_forward(model, products);
    }
    gpt2_close_products(model, unit, 0, products);
}

extern "C" void gpt2_device_backward(GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    int first = model->layout.unit_first_layer[unit], blocks = model->layout.unit_num_layers[unit];
    Bf16Products bf16_run;
    const Bf16Products *products = gpt2_open_products(model, unit, 1, &bf16_run);
    Dropout site;
    const Dropout *drop = gpt2_dropout(model, 0, DROPOUT_EMBEDDING, &site);
    if (unit == 0) {
        float *dencoded = model->acts.dresidual;  // through the embeddings' mask, in place: nothing reads it after
        if (drop)
            TIMED(backward_s, GPT2_OP_ENCODER,
                  dropout_apply_cuda(dencoded, dencoded, drop, model->B, model->T, c->channels));
        TIMED(backward_s, GPT2_OP_ENCODER,
              encoder_backward_cuda(DW(GPT2_WTE, 0), DW(GPT2_WPE, 0), gpt2_kept_grad_dtype(model), dencoded,
                                    model->inputs, model->positions_by_token, model->B, model->T, c->channels));
    } else if (blocks > 0) {
        for (int l = first + blocks - 1; l >= first; l--) {
            if (model->recompute) block_forward(model, l, products);  // the same arithmetic: bitwise the same
            block_backward(model, l, products);
        }
    } else {
        head_backward(model, products);
    }
    gpt2_close_products(model, unit, 1, products);
}
