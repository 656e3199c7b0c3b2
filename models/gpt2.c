// gpt2.c: GPT-2's layout (which tensors exist and which unit reads them) and
// its forward and backward, one unit at a time.
#include "gpt2.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../common/random.h"
#include "gpt2_ops.h"

static const char *const kind_names[GPT2_NUM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

int gpt2_config_preset(const char *name, int vocab_size, GPT2Config *out) {
    int depth;
    if (strcmp(name, "d2") == 0) depth = 2;
    else if (strcmp(name, "d4") == 0) depth = 4;
    else if (strcmp(name, "d6") == 0) depth = 6;
    else if (strcmp(name, "d12") == 0) depth = 12;
    else return -1;
    // llm.c's dN family: N layers, N heads of 64 channels
    out->num_layers = depth;
    out->num_heads = depth;
    out->channels = 64 * depth;
    out->max_seq_len = 1024;
    out->vocab_size = vocab_size > 0 ? vocab_size : 50257;
    out->padded_vocab_size = (out->vocab_size + 127) / 128 * 128;
    return 0;
}

void gpt2_config_validate(const GPT2Config *c, const char *source) {
    if (c->max_seq_len <= 0 || c->vocab_size <= 0 || c->num_layers <= 0 || c->num_heads <= 0 ||
        c->channels <= 0)
        fatal("%s: config sizes must be positive (maxT=%d V=%d L=%d NH=%d C=%d)", source,
              c->max_seq_len, c->vocab_size, c->num_layers, c->num_heads, c->channels);
    if (c->padded_vocab_size < c->vocab_size)
        fatal("%s: padded vocab Vp=%d is smaller than V=%d", source, c->padded_vocab_size,
              c->vocab_size);
    if (c->channels % c->num_heads != 0)
        fatal("%s: channels C=%d is not divisible by heads NH=%d", source, c->channels,
              c->num_heads);
}

// Dim 0 and the remaining size of each kind (llm.c's shapes, per layer).
static void kind_shape(const GPT2Config *c, GPT2TensorKind kind, int *rows, int *cols) {
    int C = c->channels;
    switch (kind) {
    case GPT2_WTE: *rows = c->padded_vocab_size; *cols = C; return;
    case GPT2_WPE: *rows = c->max_seq_len; *cols = C; return;
    case GPT2_QKVW: *rows = 3 * C; *cols = C; return;
    case GPT2_QKVB: *rows = 3 * C; *cols = 1; return;
    case GPT2_ATTPROJW: *rows = C; *cols = C; return;
    case GPT2_FCW: *rows = 4 * C; *cols = C; return;
    case GPT2_FCB: *rows = 4 * C; *cols = 1; return;
    case GPT2_FCPROJW: *rows = C; *cols = 4 * C; return;
    default: *rows = C; *cols = 1; return;  // layernorm weights and biases, C-sized biases
    }
}

static int is_per_layer(GPT2TensorKind kind) { return kind >= GPT2_LN1W && kind <= GPT2_FCPROJB; }

int gpt2_tensor_id(const GPT2Layout *layout, GPT2TensorKind kind, int layer) {
    int L = layout->config.num_layers;
    if (kind == GPT2_WTE) return 0;
    if (kind == GPT2_WPE) return 1;
    if (kind == GPT2_LNFW) return 2 + GPT2_BLOCK_KINDS * L;
    if (kind == GPT2_LNFB) return 3 + GPT2_BLOCK_KINDS * L;
    return 2 + GPT2_BLOCK_KINDS * layer + (kind - GPT2_LN1W);
}

void gpt2_layout_init(GPT2Layout *layout, GPT2Config config) {
    int L = config.num_layers;
    layout->config = config;
    layout->num_tensors = 4 + GPT2_BLOCK_KINDS * L;
    layout->tensors = xcalloc((size_t)layout->num_tensors, sizeof(GPT2Tensor));
    layout->num_units = L + 2;
    layout->unit_num_tensors = xcalloc((size_t)layout->num_units, sizeof(int));
    layout->unit_tensors = xcalloc((size_t)layout->num_units, sizeof(*layout->unit_tensors));

    // Walk llm.c's file order: kind by kind, and for per-layer kinds layer by layer.
    size_t offset = 0;
    for (int kind = 0; kind < GPT2_NUM_KINDS; kind++) {
        int layers = is_per_layer(kind) ? L : 1;
        for (int l = 0; l < layers; l++) {
            int layer = is_per_layer(kind) ? l : -1;
            GPT2Tensor *t = &layout->tensors[gpt2_tensor_id(layout, kind, l)];
            t->kind = kind;
            t->layer = layer;
            if (layer >= 0) snprintf(t->name, sizeof t->name, "h%d.%s", layer, kind_names[kind]);
            else snprintf(t->name, sizeof t->name, "%s", kind_names[kind]);
            kind_shape(&config, kind, &t->rows, &t->cols);
            t->numel = (size_t)t->rows * t->cols;
            t->offset = offset;
            offset += t->numel;
            t->home_unit = layer >= 0 ? 1 + layer : (kind == GPT2_LNFW || kind == GPT2_LNFB) ? L + 1 : 0;
        }
    }
    layout->num_params = offset;

    // Which tensors each unit reads: everything at home there, plus the tied wte
    // for the head.
    for (int t = 0; t < layout->num_tensors; t++) {
        int u = layout->tensors[t].home_unit;
        layout->unit_tensors[u][layout->unit_num_tensors[u]++] = t;
    }
    int head = L + 1;
    layout->unit_tensors[head][layout->unit_num_tensors[head]++] = gpt2_tensor_id(layout, GPT2_WTE, 0);
}

void gpt2_layout_free(GPT2Layout *layout) {
    free(layout->tensors);
    free(layout->unit_num_tensors);
    free(layout->unit_tensors);
    memset(layout, 0, sizeof *layout);
}

void gpt2_point_into_flat(const GPT2Layout *layout, float *flat, float **table) {
    for (int t = 0; t < layout->num_tensors; t++) table[t] = flat + layout->tensors[t].offset;
}

void gpt2_init_rows(const GPT2Layout *layout, int t, uint64_t seed, int row_begin, int row_count,
                    float *out) {
    const GPT2Tensor *tensor = &layout->tensors[t];
    const GPT2Config *c = &layout->config;
    float std = 0.02f;
    // residual projections are scaled down by depth, as in GPT-2
    if (tensor->kind == GPT2_ATTPROJW || tensor->kind == GPT2_FCPROJW)
        std = 0.02f / sqrtf(2.0f * (float)c->num_layers);
    for (int r = 0; r < row_count; r++) {
        int row = row_begin + r;
        for (int col = 0; col < tensor->cols; col++) {
            size_t i = (size_t)row * tensor->cols + col;
            float value;
            switch (tensor->kind) {
            case GPT2_LN1W: case GPT2_LN2W: case GPT2_LNFW: value = 1.0f; break;
            case GPT2_WTE: case GPT2_WPE: case GPT2_QKVW: case GPT2_ATTPROJW: case GPT2_FCW:
            case GPT2_FCPROJW:
                value = (float)(std * random_normal(seed, (uint64_t)t, i));
                break;
            default: value = 0.0f; break;  // biases
            }
            if (tensor->kind == GPT2_WTE && row >= c->vocab_size) value = 0.0f;  // padding rows
            out[(size_t)r * tensor->cols + col] = value;
        }
    }
}

// Lays the activation tensors out in one buffer; with memory == NULL it only counts.
static size_t layout_activations(GPT2Activations *a, float *memory, const GPT2Config *c, int B,
                                 int T) {
    size_t L = c->num_layers, C = c->channels, NH = c->num_heads, Vp = c->padded_vocab_size;
    size_t BT = (size_t)B * T;
    struct { float **ptr; size_t count; } parts[] = {
        {&a->encoded, BT * C},        {&a->ln1, L * BT * C},         {&a->ln1_mean, L * BT},
        {&a->ln1_rstd, L * BT},       {&a->qkv, L * BT * 3 * C},     {&a->atty, L * BT * C},
        {&a->att, L * B * NH * T * T}, {&a->attproj, L * BT * C},    {&a->residual2, L * BT * C},
        {&a->ln2, L * BT * C},        {&a->ln2_mean, L * BT},        {&a->ln2_rstd, L * BT},
        {&a->fch, L * BT * 4 * C},    {&a->fch_gelu, L * BT * 4 * C}, {&a->fcproj, L * BT * C},
        {&a->residual3, L * BT * C},  {&a->lnf, BT * C},             {&a->lnf_mean, BT},
        {&a->lnf_rstd, BT},           {&a->logits, BT * Vp},         {&a->probs, BT * Vp},
        {&a->losses, BT},             {&a->dresidual, BT * C},       {&a->dln, BT * C},
        {&a->dqkv, BT * 3 * C},       {&a->datty, BT * C},           {&a->dfch_gelu, BT * 4 * C},
        {&a->dfch, BT * 4 * C},       {&a->att_scratch, 2 * (size_t)T * T},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (memory) *parts[i].ptr = memory + total;
        total += parts[i].count;
    }
    return total;
}

size_t gpt2_num_activations(const GPT2Config *config, int B, int T) {
    GPT2Activations unused;
    return layout_activations(&unused, NULL, config, B, T);
}

void gpt2_init(GPT2 *model, GPT2Config config, int B, int T, MemAccount *acct) {
    memset(model, 0, sizeof *model);
    gpt2_config_validate(&config, "model");
    if (B <= 0 || T <= 0) fatal("batch rows (%d) and sequence length (%d) must be positive", B, T);
    if (T > config.max_seq_len)
        fatal("sequence length %d exceeds the model's maximum %d", T, config.max_seq_len);
    gpt2_layout_init(&model->layout, config);
    model->B = B;
    model->T = T;
    model->params = xcalloc((size_t)model->layout.num_tensors, sizeof(float *));
    model->grads = xcalloc((size_t)model->layout.num_tensors, sizeof(float *));
    model->num_acts = layout_activations(&model->acts, NULL, &config, B, T);
    model->acts_memory = mem_alloc_floats(acct, MEM_ACTIVATIONS, model->num_acts);
    layout_activations(&model->acts, model->acts_memory, &config, B, T);
}

void gpt2_free(GPT2 *model, MemAccount *acct) {
    mem_free_floats(acct, MEM_ACTIVATIONS, model->acts_memory, model->num_acts);
    free(model->params);
    free(model->grads);
    gpt2_layout_free(&model->layout);
    memset(model, 0, sizeof *model);
}

void gpt2_set_batch(GPT2 *model, const int *inputs, const int *targets) {
    int V = model->layout.config.vocab_size;
    for (int i = 0; i < model->B * model->T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) fatal("input token id %d is outside the vocab [0, %d)", inputs[i], V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target token id %d is outside the vocab [0, %d)", targets[i], V);
    }
    model->inputs = inputs;
    model->targets = targets;
}

// The parameter (or gradient) of `kind` in block `l` through the pointer table.
#define P(kind, l) model->params[gpt2_tensor_id(&model->layout, (kind), (l))]
#define G(kind, l) model->grads[gpt2_tensor_id(&model->layout, (kind), (l))]

static void block_forward(GPT2 *model, int l) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, NH = c->num_heads;
    size_t BTC = (size_t)B * T * C, BT = (size_t)B * T;
    GPT2Activations *a = &model->acts;
    float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTC;  // (B,T,C) block input
    float *ln1 = a->ln1 + l * BTC, *qkv = a->qkv + l * 3 * BTC, *atty = a->atty + l * BTC;
    float *att = a->att + (size_t)l * B * NH * T * T, *attproj = a->attproj + l * BTC;
    float *residual2 = a->residual2 + l * BTC, *ln2 = a->ln2 + l * BTC;
    float *fch = a->fch + l * 4 * BTC, *fch_gelu = a->fch_gelu + l * 4 * BTC;
    float *fcproj = a->fcproj + l * BTC, *residual3 = a->residual3 + l * BTC;

    layernorm_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, residual, P(GPT2_LN1W, l),
                      P(GPT2_LN1B, l), B, T, C);
    matmul_forward(qkv, ln1, P(GPT2_QKVW, l), P(GPT2_QKVB, l), B, T, C, 3 * C);
    attention_forward(atty, att, qkv, B, T, C, NH);
    matmul_forward(attproj, atty, P(GPT2_ATTPROJW, l), P(GPT2_ATTPROJB, l), B, T, C, C);
    residual_forward(residual2, residual, attproj, (int)BTC);
    layernorm_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, residual2, P(GPT2_LN2W, l),
                      P(GPT2_LN2B, l), B, T, C);
    matmul_forward(fch, ln2, P(GPT2_FCW, l), P(GPT2_FCB, l), B, T, C, 4 * C);
    gelu_forward(fch_gelu, fch, (int)(4 * BTC));
    matmul_forward(fcproj, fch_gelu, P(GPT2_FCPROJW, l), P(GPT2_FCPROJB, l), B, T, 4 * C, C);
    residual_forward(residual3, residual2, fcproj, (int)BTC);
}

// a->dresidual holds d(residual3) on entry and d(block input) on return: the
// residual additions pass the gradient through, the layernorms add to it.
static void block_backward(GPT2 *model, int l) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, NH = c->num_heads;
    size_t BTC = (size_t)B * T * C, BT = (size_t)B * T;
    GPT2Activations *a = &model->acts;
    float *residual = l == 0 ? a->encoded : a->residual3 + (l - 1) * BTC;
    float *ln1 = a->ln1 + l * BTC, *qkv = a->qkv + l * 3 * BTC, *atty = a->atty + l * BTC;
    float *att = a->att + (size_t)l * B * NH * T * T, *residual2 = a->residual2 + l * BTC;
    float *ln2 = a->ln2 + l * BTC, *fch = a->fch + l * 4 * BTC, *fch_gelu = a->fch_gelu + l * 4 * BTC;

    memset(a->dfch_gelu, 0, 4 * BTC * sizeof(float));
    memset(a->dfch, 0, 4 * BTC * sizeof(float));
    memset(a->dln, 0, BTC * sizeof(float));
    matmul_backward(a->dfch_gelu, G(GPT2_FCPROJW, l), G(GPT2_FCPROJB, l), a->dresidual, fch_gelu,
                    P(GPT2_FCPROJW, l), B, T, 4 * C, C);
    gelu_backward(a->dfch, fch, a->dfch_gelu, (int)(4 * BTC));
    matmul_backward(a->dln, G(GPT2_FCW, l), G(GPT2_FCB, l), a->dfch, ln2, P(GPT2_FCW, l), B, T, C,
                    4 * C);
    layernorm_backward(a->dresidual, G(GPT2_LN2W, l), G(GPT2_LN2B, l), a->dln, residual2,
                       P(GPT2_LN2W, l), a->ln2_mean + l * BT, a->ln2_rstd + l * BT, B, T, C);

    memset(a->datty, 0, BTC * sizeof(float));
    memset(a->dqkv, 0, 3 * BTC * sizeof(float));
    memset(a->dln, 0, BTC * sizeof(float));
    matmul_backward(a->datty, G(GPT2_ATTPROJW, l), G(GPT2_ATTPROJB, l), a->dresidual, atty,
                    P(GPT2_ATTPROJW, l), B, T, C, C);
    attention_backward(a->dqkv, a->datty, qkv, att, a->att_scratch, B, T, C, NH);
    matmul_backward(a->dln, G(GPT2_QKVW, l), G(GPT2_QKVB, l), a->dqkv, ln1, P(GPT2_QKVW, l), B, T,
                    C, 3 * C);
    layernorm_backward(a->dresidual, G(GPT2_LN1W, l), G(GPT2_LN1B, l), a->dln, residual,
                       P(GPT2_LN1W, l), a->ln1_mean + l * BT, a->ln1_rstd + l * BT, B, T, C);
}

static void head_forward(GPT2 *model) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, residual, P(GPT2_LNFW, 0), P(GPT2_LNFB, 0),
                      B, T, C);
    matmul_forward(a->logits, a->lnf, P(GPT2_WTE, 0), NULL, B, T, C, c->padded_vocab_size);
    if (!model->targets) return;
    softmax_crossentropy_forward(a->losses, a->probs, a->logits, model->targets, B, T,
                                 c->vocab_size, c->padded_vocab_size);
    double sum = 0;
    for (int i = 0; i < B * T; i++) sum += a->losses[i];
    model->mean_loss = (float)(sum / (B * T));
}

static void head_backward(GPT2 *model) {
    const GPT2Config *c = &model->layout.config;
    int B = model->B, T = model->T, C = c->channels, L = c->num_layers;
    GPT2Activations *a = &model->acts;
    float *residual = a->residual3 + (size_t)(L - 1) * B * T * C;
    CHECK(model->targets, "backward needs targets");
    float dloss = 1.0f / (float)(B * T);  // the loss is the mean over this rank's tokens
    softmax_crossentropy_backward(a->logits, a->probs, model->targets, dloss, B, T, c->vocab_size,
                                  c->padded_vocab_size);
    memset(a->dln, 0, (size_t)B * T * C * sizeof(float));
    memset(a->dresidual, 0, (size_t)B * T * C * sizeof(float));
    matmul_backward(a->dln, G(GPT2_WTE, 0), NULL, a->logits, a->lnf, P(GPT2_WTE, 0), B, T, C,
                    c->padded_vocab_size);
    layernorm_backward(a->dresidual, G(GPT2_LNFW, 0), G(GPT2_LNFB, 0), a->dln, residual,
                       P(GPT2_LNFW, 0), a->lnf_mean, a->lnf_rstd, B, T, C);
}

void gpt2_forward_unit(GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    CHECK(model->inputs, "forward before gpt2_set_batch");
    if (unit == 0)
        encoder_forward(model->acts.encoded, model->inputs, P(GPT2_WTE, 0), P(GPT2_WPE, 0), model->B,
                        model->T, c->channels);
    else if (unit <= c->num_layers)
        block_forward(model, unit - 1);
    else
        head_forward(model);
}

void gpt2_backward_unit(GPT2 *model, int unit) {
    const GPT2Config *c = &model->layout.config;
    if (unit == 0)
        encoder_backward(G(GPT2_WTE, 0), G(GPT2_WPE, 0), model->acts.dresidual, model->inputs,
                         model->B, model->T, c->channels);
    else if (unit <= c->num_layers)
        block_backward(model, unit - 1);
    else
        head_backward(model);
}

double gpt2_flops_per_step(const GPT2Config *c, int B, int T) {
    double C = c->channels, L = c->num_layers, tokens = (double)B * T;
    // weights used in matrix products: 12 C^2 per block plus the tied head (Vp x C)
    double matmul_params = 12.0 * C * C * L + (double)c->padded_vocab_size * C;
    // q @ k^T and att @ v: 2 * 2 * T * C multiply-adds per token per layer, x3 for backward
    double attention = 6.0 * 2.0 * T * C * L * tokens;
    return 6.0 * matmul_params * tokens + attention;
}
