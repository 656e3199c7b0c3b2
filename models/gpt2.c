// gpt2.c: GPT-2's layout (which tensors exist and which unit reads them), its
// initial values, its activation buffers and its batch. The forward and backward
// of each unit are in gpt2_cpu.c (CPU build) and gpt2_cuda.cu (CUDA build).
#include "models/gpt2.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "util/errors.h"
#include "util/random.h"

static const char *const kind_names[GPT2_NUM_KINDS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
};

const char *const gpt2_op_names[GPT2_NUM_OPS] = {
    "encoder", "layernorm", "matmul qkv", "attention", "matmul attproj", "residual",
    "matmul fc", "gelu", "matmul fcproj", "matmul lm head", "softmax + xent",
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
    // The header's fields are int32; their products are taken in 64 bits (double
    // for the size, which no field can overflow) before anything is allocated.
    double C = c->channels, L = c->num_layers;
    double params = ((double)c->padded_vocab_size + c->max_seq_len) * C + L * (12 * C * C + 13 * C) + 2 * C;
    double gb = params * sizeof(float) / 1e9;
    const char *problem = NULL;
    if (4 * C > INT_MAX) problem = "the MLP's 4C rows do not fit a 32-bit int";
    else if (GPT2_BLOCK_KINDS * L + 4 > INT_MAX) problem = "its 12 L + 4 tensors do not fit a 32-bit int";
    else if (params * sizeof(float) > GPT2_MAX_PARAM_BYTES) problem = "more than 2^50 bytes (1126 TB)";
    if (problem)
        fatal("%s: L=%d C=%d Vp=%d maxT=%d needs %.4g GB of parameters: %s", source, c->num_layers, c->channels,
              c->padded_vocab_size, c->max_seq_len, gb, problem);
}

size_t gpt2_config_num_params(const GPT2Config *c) {
    size_t C = (size_t)c->channels, L = (size_t)c->num_layers;
    return ((size_t)c->padded_vocab_size + (size_t)c->max_seq_len) * C + L * (12 * C * C + 13 * C) + 2 * C;
}

size_t gpt2_layout_table_bytes(const GPT2Config *c) {
    size_t tensors = 4 + GPT2_BLOCK_KINDS * (size_t)c->num_layers, units = (size_t)c->num_layers + 2;
    return tensors * sizeof(GPT2Tensor) + units * (3 * sizeof(int) + sizeof(int *)) + (tensors + 1) * sizeof(int);
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
    char what[64];
    snprintf(what, sizeof what, "the tensor table of L=%d layers", L);
    mem_require_host(gpt2_layout_table_bytes(&config), what);
    memset(layout, 0, sizeof *layout);
    layout->config = config;
    layout->num_tensors = 4 + GPT2_BLOCK_KINDS * L;
    layout->tensors = xcalloc((size_t)layout->num_tensors, sizeof(GPT2Tensor));

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
        }
    }
    layout->num_params = offset;
    gpt2_layout_group_blocks(layout, 1, 0);
}

static void free_units(GPT2Layout *layout) {
    free(layout->unit_first_layer);
    free(layout->unit_num_layers);
    free(layout->unit_num_tensors);
    free(layout->unit_num_home_tensors);
    free(layout->unit_tensors);
    free(layout->unit_tensor_ids);
}

// Parameters of block `layer`: its 12 tensors.
static size_t block_params(const GPT2Layout *layout, int layer) {
    size_t numel = 0;
    for (int kind = GPT2_LN1W; kind <= GPT2_FCPROJB; kind++)
        numel += layout->tensors[gpt2_tensor_id(layout, kind, layer)].numel;
    return numel;
}

void gpt2_layout_group_blocks(GPT2Layout *layout, int unit_blocks, size_t min_params) {
    int L = layout->config.num_layers;
    CHECK(unit_blocks >= 1, "gpt2_layout_group_blocks: %d blocks a unit", unit_blocks);
    free_units(layout);
    // the blocks' units, first as the number of blocks each holds (at most L of them)
    int *blocks = xcalloc((size_t)L + 2, sizeof(int)), groups = 0;
    for (int l = 0; l < L; groups++) {
        size_t params = 0;
        for (int k = 0; l < L && (min_params > 0 ? params < min_params : k < unit_blocks); k++, l++) {
            params += block_params(layout, l);
            blocks[groups]++;
        }
    }
    int U = groups + 2;
    layout->num_units = U;
    layout->unit_first_layer = xcalloc((size_t)U, sizeof(int));
    layout->unit_num_layers = xcalloc((size_t)U, sizeof(int));
    layout->unit_num_tensors = xcalloc((size_t)U, sizeof(int));
    layout->unit_num_home_tensors = xcalloc((size_t)U, sizeof(int));
    layout->unit_tensors = xcalloc((size_t)U, sizeof(int *));
    layout->unit_tensor_ids = xcalloc((size_t)layout->num_tensors + 1, sizeof(int));
    layout->unit_first_layer[0] = layout->unit_first_layer[U - 1] = -1;
    for (int u = 1, first = 0; u < U - 1; first += blocks[u - 1], u++) {
        layout->unit_first_layer[u] = first;
        layout->unit_num_layers[u] = blocks[u - 1];
    }
    free(blocks);
    // each tensor's home: the unit that reads it (wte's: the embedding, whose
    // backward comes last)
    for (int t = 0; t < layout->num_tensors; t++) {
        GPT2Tensor *tensor = &layout->tensors[t];
        tensor->home_unit = tensor->kind == GPT2_LNFW || tensor->kind == GPT2_LNFB ? U - 1 : 0;
        for (int u = 1; tensor->layer >= 0 && u < U - 1; u++)
            if (tensor->layer >= layout->unit_first_layer[u]) tensor->home_unit = u;
        tensor->last_unit = tensor->kind == GPT2_WTE ? U - 1 : tensor->home_unit;
    }
    // Which tensors each unit reads: everything at home there, in tensor order,
    // plus the tied wte for the head.
    int at = 0;
    for (int u = 0; u < U; u++) {
        layout->unit_tensors[u] = layout->unit_tensor_ids + at;
        for (int t = 0; t < layout->num_tensors; t++)
            if (layout->tensors[t].home_unit == u) layout->unit_tensors[u][layout->unit_num_tensors[u]++] = t;
        layout->unit_num_home_tensors[u] = layout->unit_num_tensors[u];
        if (u == U - 1) layout->unit_tensors[u][layout->unit_num_tensors[u]++] = gpt2_tensor_id(layout, GPT2_WTE, 0);
        at += layout->unit_num_tensors[u];
    }
}

void gpt2_layout_free(GPT2Layout *layout) {
    free(layout->tensors);
    free_units(layout);
    memset(layout, 0, sizeof *layout);
}

void gpt2_point_into_flat(const GPT2Layout *layout, float *flat, void **table) {
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
// With recompute, the blocks' inputs (encoded and every residual3) are kept, and
// one set of the other per-layer activations serves the block that runs.
static size_t layout_activations(GPT2Activations *a, float *memory, const GPT2Config *c, int B,
                                 int T, int recompute, AttentionKeeps attention, ClassifierKeeps classifier) {
    size_t L = recompute ? 1 : (size_t)c->num_layers, C = c->channels, NH = c->num_heads;
    size_t Vp = c->padded_vocab_size, all_layers = c->num_layers;
    size_t BT = (size_t)B * T;
    // An attention that keeps its probabilities holds one layer's (B,NH,T,T)
    // gradient whole in backward (the GPU's products take it at once, the CPU's
    // (batch, head) pairs run in parallel); the fused one keeps a log-sum-exp per
    // row and, in backward, each row's dot of d(atty) and atty.
    int probabilities = attention == ATTENTION_KEEPS_PROBABILITIES;
    size_t att = probabilities ? (size_t)B * NH * T * T : 0, att_rows = probabilities ? 0 : (size_t)B * NH * T;
    size_t probs = classifier == CLASSIFIER_KEEPS_PROBABILITIES ? BT * Vp : 0;
    struct { float **ptr; size_t count; } parts[] = {
        {&a->encoded, BT * C},        {&a->ln1, L * BT * C},         {&a->ln1_mean, L * BT},
        {&a->ln1_rstd, L * BT},       {&a->qkv, L * BT * 3 * C},     {&a->atty, L * BT * C},
        {&a->att, L * att},           {&a->att_lse, L * att_rows},   {&a->attproj, L * BT * C},
        {&a->residual2, L * BT * C},  {&a->ln2, L * BT * C},         {&a->ln2_mean, L * BT},
        {&a->ln2_rstd, L * BT},
        {&a->fch, L * BT * 4 * C},    {&a->fch_gelu, L * BT * 4 * C}, {&a->fcproj, L * BT * C},
        {&a->residual3, all_layers * BT * C}, {&a->lnf, BT * C},     {&a->lnf_mean, BT},
        {&a->lnf_rstd, BT},           {&a->logits, BT * Vp},         {&a->probs, probs},
        {&a->losses, BT},             {&a->dresidual, BT * C},       {&a->dln, BT * C},
        {&a->dqkv, BT * 3 * C},       {&a->datty, BT * C},           {&a->dfch_gelu, BT * 4 * C},
        {&a->dfch, BT * 4 * C},       {&a->att_scratch, att},        {&a->att_delta, att_rows},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (memory) *parts[i].ptr = parts[i].count ? memory + total : NULL;  // NULL: what a fused op does not keep
        total += parts[i].count;
    }
    return total;
}

void gpt2_init(GPT2 *model, GPT2Config config, int B, int T, int recompute, AttentionKeeps attention,
               ClassifierKeeps classifier, MemAccount *acct) {
    memset(model, 0, sizeof *model);
    gpt2_config_validate(&config, "model");
    if (B <= 0 || T <= 0) fatal("batch rows (%d) and sequence length (%d) must be positive", B, T);
    if (T > config.max_seq_len)
        fatal("sequence length %d exceeds the model's maximum %d", T, config.max_seq_len);
    CHECK(attention == ATTENTION_KEEPS_PROBABILITIES || gpt2_device_fuses_attention(),
          "the fused attention runs on a GPU");
    gpt2_layout_init(&model->layout, config);
    model->B = B;
    model->grad_accum = 1;
    model->T = T;
    model->recompute = recompute;
    model->attention = attention;
    model->classifier = classifier;
    model->params = xcalloc((size_t)model->layout.num_tensors, sizeof(void *));
    model->grads = xcalloc((size_t)model->layout.num_tensors, sizeof(void *));
    model->unit_params = xcalloc((size_t)model->layout.num_tensors, sizeof(float *));
    model->unit_grads = xcalloc((size_t)model->layout.num_tensors, sizeof(float *));
    model->mem = acct;
    model->num_acts = layout_activations(&model->acts, NULL, &config, B, T, recompute, attention, classifier);
    model->acts_memory = device_alloc(acct, MEM_ACTIVATIONS, model->num_acts);
    model->batch = device_alloc_ints(acct, MEM_ACTIVATIONS, GPT2_BATCH_ARRAYS * (size_t)B * T);
    layout_activations(&model->acts, model->acts_memory, &config, B, T, recompute, attention, classifier);
}

static size_t operand_aligned(size_t count) {
    return (count + GPT2_OPERAND_ALIGN - 1) / GPT2_OPERAND_ALIGN * GPT2_OPERAND_ALIGN;
}

size_t gpt2_product_operands(size_t rows, int C, int OC, int backward) {
    // forward: inp; backward: inp and dout (the weight is bf16 already)
    return operand_aligned(rows * C) + (backward ? operand_aligned(rows * OC) : 0);
}

size_t gpt2_unit_operands(const GPT2 *model, int unit, int backward) {
    const GPT2Config *c = &model->layout.config;
    size_t rows = (size_t)model->B * model->T, most = 0;
    int C = c->channels;
    if (unit == 0 || model->param_dtype != DTYPE_BF16) return 0;
    if (model->layout.unit_num_layers[unit] == 0) return gpt2_product_operands(rows, C, c->padded_vocab_size, backward);
    const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};  // qkv, attproj, fc, fcproj
    for (int i = 0; i < 4; i++)
        for (int pass = 0; pass <= backward; pass++) {
            size_t n = gpt2_product_operands(rows, shapes[i][0], shapes[i][1], pass);
            if (n > most) most = n;
        }
    return most;
}

const Bf16Products *gpt2_open_products(GPT2 *model, int unit, int backward, Bf16Products *storage) {
    size_t count = gpt2_unit_operands(model, unit, backward);
    if (!count) return NULL;
    *storage = (Bf16Products){.operands = device_alloc_overwritten_as(model->mem, MEM_ACTIVATIONS, count, DTYPE_BF16),
                              .grad_dtype = model->grad_dtype};
    return storage;
}

void gpt2_close_products(GPT2 *model, int unit, int backward, const Bf16Products *products) {
    if (products)
        device_free_as(model->mem, MEM_ACTIVATIONS, products->operands, gpt2_unit_operands(model, unit, backward),
                       DTYPE_BF16);
}

float gpt2_dloss(const GPT2 *model) { return 1.0f / ((float)model->B * model->T * model->grad_accum); }

void gpt2_free(GPT2 *model, MemAccount *acct) {
    device_free(acct, MEM_ACTIVATIONS, model->acts_memory, model->num_acts);
    device_free_ints(acct, MEM_ACTIVATIONS, model->batch, GPT2_BATCH_ARRAYS * (size_t)model->B * model->T);
    free(model->params);
    free(model->grads);
    free(model->unit_params);
    free(model->unit_grads);
    gpt2_layout_free(&model->layout);
    memset(model, 0, sizeof *model);
}

void gpt2_positions_by_token(int *order, const int *inputs, size_t n, int V) {
    size_t *start = xcalloc((size_t)V + 1, sizeof(size_t));
    for (size_t i = 0; i < n; i++) start[inputs[i] + 1]++;
    for (int v = 0; v < V; v++) start[v + 1] += start[v];
    for (size_t i = 0; i < n; i++) order[start[inputs[i]]++] = (int)i;
    free(start);
}

void gpt2_set_batch(GPT2 *model, const int *inputs, const int *targets) {
    int V = model->layout.config.vocab_size;
    size_t n = (size_t)model->B * model->T;
    if (!inputs) {  // the dry run: a training batch's shapes, no token read or kept
        model->positions_by_token = NULL;
        model->inputs = model->batch;
        model->targets = model->batch + n;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) fatal("input token id %d is outside the vocab [0, %d)", inputs[i], V);
        if (targets && (targets[i] < 0 || targets[i] >= V))
            fatal("target token id %d is outside the vocab [0, %d)", targets[i], V);
    }
    // the model keeps its own copy, on the device its layers run on
    device_ints_from_host(model->batch, inputs, n);
    if (targets) device_ints_from_host(model->batch + n, targets, n);
    model->positions_by_token = NULL;
    if (gpt2_device_sums_by_token(model)) {  // an O(V) pass: only for the device that reads it
        int *order = xmalloc(n * sizeof(int));
        gpt2_positions_by_token(order, inputs, n, V);
        device_ints_from_host(model->batch + 2 * n, order, n);
        free(order);
        model->positions_by_token = model->batch + 2 * n;
    }
    model->inputs = model->batch;
    model->targets = targets ? model->batch + n : NULL;
}

GPT2BlockActs gpt2_block_acts(const GPT2 *model, int layer) {
    const GPT2Activations *a = &model->acts;
    size_t BT = (size_t)model->B * model->T, BTC = BT * model->layout.config.channels;
    size_t heads = BT * model->layout.config.num_heads;  // rows of attention scores
    size_t l = model->recompute ? 0 : (size_t)layer;  // recompute: one set, shared by every block
    return (GPT2BlockActs){
        .residual = layer == 0 ? a->encoded : a->residual3 + (layer - 1) * BTC,
        .ln1 = a->ln1 + l * BTC, .ln1_mean = a->ln1_mean + l * BT, .ln1_rstd = a->ln1_rstd + l * BT,
        .qkv = a->qkv + l * 3 * BTC, .atty = a->atty + l * BTC,
        .att = a->att ? a->att + l * heads * model->T : NULL, .att_lse = a->att_lse ? a->att_lse + l * heads : NULL,
        .attproj = a->attproj + l * BTC, .residual2 = a->residual2 + l * BTC,
        .ln2 = a->ln2 + l * BTC, .ln2_mean = a->ln2_mean + l * BT, .ln2_rstd = a->ln2_rstd + l * BT,
        .fch = a->fch + l * 4 * BTC, .fch_gelu = a->fch_gelu + l * 4 * BTC,
        .fcproj = a->fcproj + l * BTC, .residual3 = a->residual3 + layer * BTC,
    };
}

const Dropout *gpt2_dropout(const GPT2 *model, int layer, DropoutSite site, Dropout *storage) {
    if (model->dropout <= 0 || model->dropout_step <= 0) return NULL;
    uint64_t key = splitmix64(model->dropout_seed ^ 0x64726F706F7574ull);  // "dropout": its own stream
    key = splitmix64(splitmix64(key + (uint64_t)model->dropout_step) + (uint64_t)(4 * layer + (int)site));
    *storage = (Dropout){.key = key, .row0 = model->row0, .threshold = (uint32_t)(model->dropout * 16777216.0),
                         .scale = 1.0f / (1.0f - model->dropout)};
    return storage;
}

static void print_op_row(const char *name, double forward_s, double backward_s, double total_s, double step_s) {
    char forward[16] = "-", backward[16] = "-";
    if (forward_s >= 0) snprintf(forward, sizeof forward, "%.3f", 1e3 * forward_s);
    if (backward_s >= 0) snprintf(backward, sizeof backward, "%.3f", 1e3 * backward_s);
    printf("  %-16s %12s %12s %12.3f %9.1f%%\n", name, forward, backward, 1e3 * total_s, 100.0 * total_s / step_s);
}

void gpt2_print_op_times(const GPT2OpTimes *ops, const GPT2StepTimes *step) {
    printf("  %-16s %12s %12s %12s %10s\n", "op", "forward ms", "backward ms", "total ms", "of step");
    double forward_s = 0, backward_s = 0;
    for (int op = 0; op < GPT2_NUM_OPS; op++) {
        print_op_row(gpt2_op_names[op], ops->forward_s[op], ops->backward_s[op],
                     ops->forward_s[op] + ops->backward_s[op], step->step_s);
        forward_s += ops->forward_s[op];
        backward_s += ops->backward_s[op];
    }
    print_op_row("adamw", -1, -1, step->adamw_s, step->step_s);
    print_op_row("zero grads", -1, -1, step->zero_grads_s, step->step_s);
    double timed_s = forward_s + backward_s + step->adamw_s + step->zero_grads_s;
    print_op_row("other", -1, -1, step->step_s - timed_s, step->step_s);
    print_op_row("step", forward_s, backward_s, step->step_s, step->step_s);
}

double gpt2_flops_per_step(const GPT2Config *c, int B, int T) {
    double C = c->channels, L = c->num_layers, tokens = (double)B * T;
    // weights used in matrix products: 12 C^2 per block plus the tied head (Vp x C)
    double matmul_params = 12.0 * C * C * L + (double)c->padded_vocab_size * C;
    // q @ k^T and att @ v: 2 * 2 * T * C multiply-adds per token per layer, x3 for backward
    double attention = 6.0 * 2.0 * T * C * L * tokens;
    return 6.0 * matmul_params * tokens + attention;
}

// Whether the ops take tensor t as the run keeps it (a bf16 run's in bf16, its
// gradient added into as kept): the products' weights (a block's four matrices,
// wte in the head) and the embedding's tables (wte, wpe in its lookup).
static int taken_as_kept(const GPT2Layout *layout, int t) {
    GPT2TensorKind kind = layout->tensors[t].kind;
    return kind == GPT2_QKVW || kind == GPT2_ATTPROJW || kind == GPT2_FCW || kind == GPT2_FCPROJW ||
           kind == GPT2_WTE || kind == GPT2_WPE;
}

const void *gpt2_kept_param(const GPT2 *model, int t) {
    return model->param_dtype == DTYPE_BF16 ? model->params[t] : (const void *)model->unit_params[t];
}

void *gpt2_kept_grad(const GPT2 *model, int t) {
    return model->param_dtype == DTYPE_BF16 ? model->grads[t] : (void *)model->unit_grads[t];
}

DType gpt2_kept_grad_dtype(const GPT2 *model) {
    return model->param_dtype == DTYPE_BF16 ? model->grad_dtype : DTYPE_FP32;
}

// Which fp32 copies of tensor t a unit's pass needs: *param, a widened copy of a
// bf16 parameter; *grad, a zeroed one of a bf16 gradient. None of what the ops
// take as kept in a bf16 run (gpt2_kept_param).
static void copies(const GPT2 *model, int t, int backward, int *param, int *grad) {
    int bf16_params = model->param_dtype == DTYPE_BF16;
    int as_kept = bf16_params && taken_as_kept(&model->layout, t);
    *param = bf16_params && !as_kept;
    *grad = backward && model->grad_dtype == DTYPE_BF16 && !as_kept;
}

// Points unit_params (and, for backward, unit_grads) at what the ops read and
// write in fp32: the tensors themselves where they are fp32, else their copies
// (one block for the unit's parameters, one for its gradients); NULL where no
// op reads it in fp32. Widening is exact: the ops see exactly the bf16 values.
static void open_unit(GPT2 *model, int unit, int backward) {
    const GPT2Layout *layout = &model->layout;
    int param, grad;
    model->widened_params_count = model->widened_grads_count = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        copies(model, t, backward, &param, &grad);
        if (param) model->widened_params_count += layout->tensors[t].numel;
        if (grad) model->widened_grads_count += layout->tensors[t].numel;
    }
    if (model->widened_params_count)  // written whole by the widening below before anything reads it
        model->widened_params = device_alloc_overwritten_as(model->mem, MEM_PARAMS_GATHERED,
                                                            model->widened_params_count, DTYPE_FP32);
    if (model->widened_grads_count)
        model->widened_grads = device_alloc(model->mem, MEM_GRADS_GATHERED, model->widened_grads_count);
    size_t param_at = 0, grad_at = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t numel = layout->tensors[t].numel;
        CHECK(model->params[t], "unit %d runs without %s's parameters", unit, layout->tensors[t].name);
        copies(model, t, backward, &param, &grad);
        model->unit_params[t] = model->param_dtype == DTYPE_FP32 ? model->params[t] : NULL;
        if (param) {
            model->unit_params[t] = model->widened_params + param_at;
            device_widen(model->unit_params[t], model->params[t], numel);
            param_at += numel;
        }
        if (!backward) continue;
        CHECK(model->grads[t], "unit %d's backward has nowhere to put %s's gradient", unit, layout->tensors[t].name);
        model->unit_grads[t] = model->grad_dtype == DTYPE_FP32 ? model->grads[t] : NULL;
        if (grad) {
            model->unit_grads[t] = model->widened_grads + grad_at;
            grad_at += numel;
        }
    }
}

// The end of a unit: bf16 gradients take their fp32 copies' sums, rounded once;
// the copies go.
static void close_unit(GPT2 *model, int unit) {
    const GPT2Layout *layout = &model->layout;
    if (model->widened_grads) {
        for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
            int t = layout->unit_tensors[unit][i];
            if (model->unit_grads[t])
                device_add_rounded(model->grads[t], model->unit_grads[t], layout->tensors[t].numel);
        }
        device_free(model->mem, MEM_GRADS_GATHERED, model->widened_grads, model->widened_grads_count);
        model->widened_grads = NULL;
    }
    if (model->widened_params) {
        device_free(model->mem, MEM_PARAMS_GATHERED, model->widened_params, model->widened_params_count);
        model->widened_params = NULL;
    }
}

void gpt2_forward_unit(GPT2 *model, int unit) {
    open_unit(model, unit, 0);
    gpt2_device_forward(model, unit);
    close_unit(model, unit);
}

void gpt2_backward_unit(GPT2 *model, int unit) {
    open_unit(model, unit, 1);
    gpt2_device_backward(model, unit);
    close_unit(model, unit);
}
