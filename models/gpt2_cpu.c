// gpt2_cpu.c: the forward and backward of each unit on the CPU, composed from
// the layers in gpt2_ops.c. gpt2_cuda.cu is the same on a GPU.
#include <string.h>

#include "util/errors.h"
#include "util/timer.h"
#include "device/device.h"
#include "models/gpt2.h"
#include "models/gpt2_ops.h"

// The parameter (or gradient) of `kind` in block `l`, in fp32 through the
// pointer table; W and DW: a product's weight or an embedding table and its
// gradient as the ops take them (bf16 as kept in a bf16 run: gpt2_kept_param).
#define P(kind, l) model->unit_params[gpt2_tensor_id(&model->layout, (kind), (l))]
#define G(kind, l) model->unit_grads[gpt2_tensor_id(&model->layout, (kind), (l))]
#define W(kind, l) gpt2_kept_param(model, gpt2_tensor_id(&model->layout, (kind), (l)))
#define DW(kind, l) gpt2_kept_grad(model, gpt2_tensor_id(&model->layout, (kind), (l)))

// Runs one op call. With model->op_times set (bench_step) it also adds the
// call's wall time to op_times->forward_s[op] or ->backward_s[op] (`pass`); the
// ops finish their threads before returning, so the wall time is the op's.
#define TIMED(pass, op, call)                                                   \
    do {                                                                        \
        if (!model->op_times) { call; break; }                                  \
        double start_ = timer_now();                                            \
        call;                                                                   \
        model->op_times->pass[op] += timer_now() - start_;                      \
    } while (0)

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

    TIMED(forward_s, GPT2_OP_LAYERNORM, layernorm_forward(x.ln1, x.ln1_mean, x.ln1_rstd, x.residual,
                                                          P(GPT2_LN1W, l), P(GPT2_LN1B, l), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_QKV,
          matmul_forward(x.qkv, x.ln1, W(GPT2_QKVW, l), P(GPT2_QKVB, l), B, T, C, 3 * C, products));
    // scratch: the attention backward's, free during the forward
    TIMED(forward_s, GPT2_OP_ATTENTION,
          attention_forward(x.atty, x.att, x.qkv, a->att_scratch, att_drop, B, T, C, NH));
    TIMED(forward_s, GPT2_OP_MATMUL_ATTPROJ,
          matmul_forward(x.attproj, x.atty, W(GPT2_ATTPROJW, l), P(GPT2_ATTPROJB, l), B, T, C, C, products));
    if (attproj_drop) TIMED(forward_s, GPT2_OP_RESIDUAL, dropout_apply(x.attproj, x.attproj, attproj_drop, B, T, C));
    TIMED(forward_s, GPT2_OP_RESIDUAL, residual_forward(x.residual2, x.residual, x.attproj, (int)BTC));
    TIMED(forward_s, GPT2_OP_LAYERNORM, layernorm_forward(x.ln2, x.ln2_mean, x.ln2_rstd, x.residual2,
                                                          P(GPT2_LN2W, l), P(GPT2_LN2B, l), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_FC,
          matmul_forward(x.fch, x.ln2, W(GPT2_FCW, l), P(GPT2_FCB, l), B, T, C, 4 * C, products));
    TIMED(forward_s, GPT2_OP_GELU, gelu_forward(x.fch_gelu, x.fch, (int)(4 * BTC)));
    TIMED(forward_s, GPT2_OP_MATMUL_FCPROJ,
          matmul_forward(x.fcproj, x.fch_gelu, W(GPT2_FCPROJW, l), P(GPT2_FCPROJB, l), B, T, 4 * C, C, products));
    if (fcproj_drop) TIMED(forward_s, GPT2_OP_RESIDUAL, dropout_apply(x.fcproj, x.fcproj, fcproj_drop, B, T, C));
    TIMED(forward_s, GPT2_OP_RESIDUAL, residual_forward(x.residual3, x.residual2, x.fcproj, (int)BTC));
}

// a->dresidual holds d(residual3) on entry and d(block input) on return: the
// residual additions pass the gradient through, the layernorms add to it. With
// --dropout a residual branch gets it through the branch's mask, made in dln
// while dln is free.
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

    memset(a->dfch_gelu, 0, 4 * BTC * sizeof(float));
    memset(a->dfch, 0, 4 * BTC * sizeof(float));
    const float *dbranch = a->dresidual;  // d(fcproj)
    if (fcproj_drop) {
        TIMED(backward_s, GPT2_OP_RESIDUAL, dropout_apply(a->dln, a->dresidual, fcproj_drop, B, T, C));
        dbranch = a->dln;
    }
    TIMED(backward_s, GPT2_OP_MATMUL_FCPROJ,
          matmul_backward(a->dfch_gelu, DW(GPT2_FCPROJW, l), G(GPT2_FCPROJB, l), dbranch, x.fch_gelu,
                          W(GPT2_FCPROJW, l), B, T, 4 * C, C, products));
    TIMED(backward_s, GPT2_OP_GELU, gelu_backward(a->dfch, x.fch, a->dfch_gelu, (int)(4 * BTC)));
    memset(a->dln, 0, BTC * sizeof(float));
    TIMED(backward_s, GPT2_OP_MATMUL_FC,
          matmul_backward(a->dln, DW(GPT2_FCW, l), G(GPT2_FCB, l), a->dfch, x.ln2, W(GPT2_FCW, l), B, T, C,
                          4 * C, products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward(a->dresidual, G(GPT2_LN2W, l), G(GPT2_LN2B, l), a->dln, x.residual2,
                             P(GPT2_LN2W, l), x.ln2_mean, x.ln2_rstd, B, T, C));

    memset(a->datty, 0, BTC * sizeof(float));
    memset(a->dqkv, 0, 3 * BTC * sizeof(float));
    dbranch = a->dresidual;  // d(attproj)
    if (attproj_drop) {
        TIMED(backward_s, GPT2_OP_RESIDUAL, dropout_apply(a->dln, a->dresidual, attproj_drop, B, T, C));
        dbranch = a->dln;
    }
    TIMED(backward_s, GPT2_OP_MATMUL_ATTPROJ,
          matmul_backward(a->datty, DW(GPT2_ATTPROJW, l), G(GPT2_ATTPROJB, l), dbranch, x.atty,
                          W(GPT2_ATTPROJW, l), B, T, C, C, products));
    TIMED(backward_s, GPT2_OP_ATTENTION,
          attention_backward(a->dqkv, a->datty, x.qkv, x.att, a->att_scratch, att_drop, B, T, C, NH));
    memset(a->dln, 0, BTC * sizeof(float));
    TIMED(backward_s, GPT2_OP_MATMUL_QKV,
          matmul_backward(a->dln, DW(GPT2_QKVW, l), G(GPT2_QKVB, l), a->dqkv, x.ln1, W(GPT2_QKVW, l), B, T, C,
                          3 * C, products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward(a->dresidual, G(GPT2_LN1W, l), G(GPT2_LN1B, l), a->dln, x.residual,
                             P(GPT2_LN1W, l), x.ln1_mean, x.ln1_rstd, B, T, C));
}

static void head_forward(GPT2 *model, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    TIMED(forward_s, GPT2_OP_LAYERNORM, layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual,
                                                          P(GPT2_LNFW, 0), P(GPT2_LNFB, 0), B, T, C));
    TIMED(forward_s, GPT2_OP_MATMUL_LM_HEAD,
          matmul_forward(a->logits, a->lnf, W(GPT2_WTE, 0), NULL, B, T, C, c->padded_vocab_size, products));
    if (!model->targets) return;
    if (model->classifier == CLASSIFIER_FUSED)  // the backward's part now: logits become dlogits
        TIMED(forward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_fused(a->losses, a->logits, model->targets, gpt2_dloss(model), B, T,
                                         c->vocab_size, c->padded_vocab_size));
    else
        TIMED(forward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_forward(a->losses, a->probs, a->logits, model->targets, B, T, c->vocab_size,
                                           c->padded_vocab_size));
    double sum = 0;
    for (int i = 0; i < B * T; i++) sum += a->losses[i];
    model->mean_loss = (float)(sum / (B * T));
}

static void head_backward(GPT2 *model, const Bf16Products *products) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    CHECK(model->targets, "backward needs targets");
    // dlogits (B,T,Vp): the fused forward wrote them over the logits; otherwise they
    // are written over the probabilities, in place: each row read and written back,
    // where writing another buffer also has the processor read each line it writes
    float *dlogits = model->classifier == CLASSIFIER_FUSED ? a->logits : a->probs;
    if (model->classifier == CLASSIFIER_KEEPS_PROBABILITIES)
        TIMED(backward_s, GPT2_OP_SOFTMAX_XENT,
              softmax_crossentropy_backward(dlogits, a->probs, model->targets, gpt2_dloss(model), B, T,
                                            c->vocab_size, c->padded_vocab_size));
    memset(a->dln, 0, (size_t)B * T * C * sizeof(float));
    memset(a->dresidual, 0, (size_t)B * T * C * sizeof(float));
    TIMED(backward_s, GPT2_OP_MATMUL_LM_HEAD,
          matmul_backward(a->dln, DW(GPT2_WTE, 0), NULL, dlogits, a->lnf, W(GPT2_WTE, 0), B, T, C,
                          c->padded_vocab_size, products));
    TIMED(backward_s, GPT2_OP_LAYERNORM,
          layernorm_backward(a->dresidual, G(GPT2_LNFW, 0), G(GPT2_LNFB, 0), a->dln, residual,
                             P(GPT2_LNFW, 0), a->lnf_mean, a->lnf_rstd, B, T, C));
}

int gpt2_device_fuses_attention(void) { return 0; }  // the CPU's attention keeps its probabilities
// encoder_backward adds each position's row in turn into fp32 gradients, each
// token's sum into bf16 ones
int gpt2_device_sums_by_token(const GPT2 *model) { return gpt2_kept_grad_dtype(model) == DTYPE_BF16; }

void gpt2_device_forward(GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    int first = model->layout.unit_first_layer[unit], blocks = model->layout.unit_num_layers[unit];
    CHECK(model->inputs, "forward before gpt2_set_batch");
    Bf16Products bf16_run;
    const Bf16Products *products = gpt2_open_products(model, unit, 0, &bf16_run);
    Dropout site;
    const Dropout *drop = gpt2_dropout(model, 0, DROPOUT_EMBEDDING, &site);
    if (unit == 0) {
        TIMED(forward_s, GPT2_OP_ENCODER, encoder_forward(model->acts.encoded, model->inputs, W(GPT2_WTE, 0),
                                                          W(GPT2_WPE, 0), model->param_dtype, model->B, model->T,
                                                          c->channels));
        if (drop)
            TIMED(forward_s, GPT2_OP_ENCODER,
                  dropout_apply(model->acts.encoded, model->acts.encoded, drop, model->B, model->T, c->channels));
    } else if (blocks > 0) {
        for (int l = first; l < first + blocks; l++) block_forward(model, l, products);
    } else {
        head_forward(model, products);
    }
    gpt2_close_products(model, unit, 0, products);
}

void gpt2_device_backward(GPT2 *model, int unit) {
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
                  dropout_apply(dencoded, dencoded, drop, model->B, model->T, c->channels));
        TIMED(backward_s, GPT2_OP_ENCODER, encoder_backward(DW(GPT2_WTE, 0), DW(GPT2_WPE, 0), gpt2_kept_grad_dtype(model),
                                                            dencoded, model->inputs, model->positions_by_token,
                                                            model->B, model->T, c->channels));
    } else if (blocks > 0) {
        for (int l = first + blocks - 1; l >= first; l--) {
            if (model->recompute) block_forward(model, l, products);  // the same arithmetic: bitwise the same values
            block_backward(model, l, products);
        }
    } else {
        head_backward(model, products);
    }
    gpt2_close_products(model, unit, 1, products);
}

