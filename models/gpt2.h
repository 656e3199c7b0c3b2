// gpt2.h: GPT-2 as in llm.c's train_gpt2.c (tied wte / lm head, learned wpe,
// pre-LN blocks, tanh GELU, causal attention), split into UNITS so that a
// data-parallel strategy can fetch a unit's parameters just before it runs:
//
//   unit 0        embedding      reads wte, wpe
//   unit 1 .. L   block l-1      reads the 12 tensors of that block
//   unit L+1      head + loss    reads lnfw, lnfb and wte again (tied)
//
// gpt2_layout_group_blocks may group J consecutive blocks into one unit (ZeRO-3's
// and FSDP's --unit-blocks, --wrap-min-params): U = ceil(L/J) + 2 units, the
// blocks' units 1 .. U-2 reading 12 tensors per block, the head U-1.
//
// The model never owns parameters or gradients. It reads them through the
// pointer tables model->params[t] and model->grads[t] (one entry per tensor),
// which whoever runs the model fills in before a unit runs. The single-rank
// trainer points them into one flat buffer; the strategies point them into
// gathered copies. They hold model->param_dtype and model->grad_dtype elements:
// fp32, or bf16 (--precision, --reduce-dtype), which the ops, written in fp32,
// see through fp32 copies of the running unit's tensors (gpt2.c).
#ifndef SHARDLAB_GPT2_H
#define SHARDLAB_GPT2_H

#include <stddef.h>
#include <stdint.h>

#include "device/dtype.h"
#include "device/memory.h"
#include "device/optim.h"
#include "models/bf16_products.h"
#include "models/dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp >= V; rows V..Vp-1 of wte stay zero
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// The 16 kinds of parameter tensor, in llm.c's file order.
typedef enum {
    GPT2_WTE, GPT2_WPE,
    GPT2_LN1W, GPT2_LN1B, GPT2_QKVW, GPT2_QKVB, GPT2_ATTPROJW, GPT2_ATTPROJB,
    GPT2_LN2W, GPT2_LN2B, GPT2_FCW, GPT2_FCB, GPT2_FCPROJW, GPT2_FCPROJB,
    GPT2_LNFW, GPT2_LNFB,
    GPT2_NUM_KINDS
} GPT2TensorKind;

#define GPT2_BLOCK_KINDS 12       // GPT2_LN1W .. GPT2_FCPROJB

// One parameter tensor. Per-layer tensors are separate (layer 3's qkvw is one
// tensor); in llm.c's flat layout they sit side by side, layer after layer.
typedef struct {
    char name[24];        // "h3.qkvw"
    GPT2TensorKind kind;
    int layer;            // block index, -1 for wte, wpe, lnfw, lnfb
    int rows;             // dim 0 (the dim FSDP slices)
    int cols;             // product of the other dims (1 for vectors)
    size_t numel;         // rows * cols
    size_t offset;        // first element in llm.c's flat layout
    int home_unit;        // the unit whose backward touches it last (wte: unit 0)
    int last_unit;        // the unit whose forward reads it last (wte: the head, U-1)
} GPT2Tensor;

typedef struct {
    GPT2Config config;
    size_t num_params;                                 // all elements, padded vocab included
    int num_tensors;                                   // 2 + 12 L + 2
    GPT2Tensor *tensors;                               // (num_tensors)
    int num_units;                                     // U: L + 2, or ceil(L/J) + 2 with J blocks a unit
    int *unit_first_layer;                             // (num_units) a blocks' unit's first block; -1 otherwise
    int *unit_num_layers;                              // (num_units) its blocks; 0 for the embedding and the head
    int *unit_num_tensors;                             // (num_units)
    int *unit_num_home_tensors;                        // (num_units) the first of a unit's tensors, those at home
                                                       // in it (all but the head's wte, which comes last)
    int **unit_tensors;                                // (num_units) tensor ids each unit reads, pointing into
    int *unit_tensor_ids;                              // (num_tensors + 1): every tensor once, wte twice
} GPT2Layout;

// What the attention keeps for its backward: its probabilities, (B,NH,T,T) per
// layer; or, fused into one pass over the keys (a GPU's --fused-attention,
// attention_cuda.cu), each row's log-sum-exp of scores, (B,NH,T) per layer.
typedef enum { ATTENTION_KEEPS_PROBABILITIES, ATTENTION_KEEPS_LOGSUMEXP } AttentionKeeps;

// What the classifier keeps for its backward: the softmax's probabilities,
// (B,T,Vp); or, fused into one pass in the forward (--fused-classifier), nothing:
// that pass writes the loss's gradient over the logits, the only thing the
// backward needs of them (the same arithmetic: the same bits).
typedef enum { CLASSIFIER_KEEPS_PROBABILITIES, CLASSIFIER_FUSED } ClassifierKeeps;

// Forward activations of one rank's (B, T) batch, plus the backward scratch that
// every block reuses. All of it lives in one buffer counted as MEM_ACTIVATIONS.
// With recompute (gpt2_init), the per-layer arrays other than residual3 hold
// one layer (L = 1 below), shared by the blocks. Of att/att_scratch and
// att_lse/att_delta, the model's attention (AttentionKeeps) has one pair; the
// other is NULL.
typedef struct {
    float *encoded;     // (B,T,C)
    float *ln1;         // (L,B,T,C)
    float *ln1_mean;    // (L,B,T)
    float *ln1_rstd;    // (L,B,T)
    float *qkv;         // (L,B,T,3C)
    float *atty;        // (L,B,T,C)
    float *att;         // (L,B,NH,T,T) the attention probabilities
    float *att_lse;     // (L,B,NH,T) each attention row's log-sum-exp of scores
    float *attproj;     // (L,B,T,C)
    float *residual2;   // (L,B,T,C)
    float *ln2;         // (L,B,T,C)
    float *ln2_mean;    // (L,B,T)
    float *ln2_rstd;    // (L,B,T)
    float *fch;         // (L,B,T,4C)
    float *fch_gelu;    // (L,B,T,4C)
    float *fcproj;      // (L,B,T,C)
    float *residual3;   // (L,B,T,C)
    float *lnf;         // (B,T,C)
    float *lnf_mean;    // (B,T)
    float *lnf_rstd;    // (B,T)
    float *logits;      // (B,T,Vp) logits after forward (fused classifier: already dlogits); the GPU's dlogits in backward
    float *probs;       // (B,T,Vp), or NULL: the fused classifier keeps none; the CPU's dlogits in backward
    float *losses;      // (B,T)
    // backward scratch
    float *dresidual;   // (B,T,C) gradient of the residual stream, flowing down
    float *dln;         // (B,T,C) gradient of a layernorm output
    float *dqkv;        // (B,T,3C)
    float *datty;       // (B,T,C)
    float *dfch_gelu;   // (B,T,4C)
    float *dfch;        // (B,T,4C)
    float *att_scratch; // (B,NH,T,T) attention backward: d(att) of each (batch, head)
    float *att_delta;   // (B,NH,T) fused attention backward: each row's dot of d(atty) and atty
} GPT2Activations;

// Block l's slices of the per-layer activations, and its input.
typedef struct {
    float *residual;    // (B,T,C) the block's input: encoded, or the previous block's residual3
    float *ln1, *ln1_mean, *ln1_rstd;   // (B,T,C) (B,T) (B,T)
    float *qkv;         // (B,T,3C)
    float *atty;        // (B,T,C)
    float *att;         // (B,NH,T,T)
    float *att_lse;     // (B,NH,T)
    float *attproj;     // (B,T,C)
    float *residual2;   // (B,T,C)
    float *ln2, *ln2_mean, *ln2_rstd;   // (B,T,C) (B,T) (B,T)
    float *fch, *fch_gelu;              // (B,T,4C)
    float *fcproj;      // (B,T,C)
    float *residual3;   // (B,T,C)
} GPT2BlockActs;

// The batch arrays on the device: inputs, targets, positions_by_token.
#define GPT2_BATCH_ARRAYS 3

// The kinds of op a CPU step runs, for per-op timing (bench_step). The five
// matrix products of the model are told apart; attention includes its own
// small products and softmax.
typedef enum {
    GPT2_OP_ENCODER, GPT2_OP_LAYERNORM, GPT2_OP_MATMUL_QKV, GPT2_OP_ATTENTION,
    GPT2_OP_MATMUL_ATTPROJ, GPT2_OP_RESIDUAL, GPT2_OP_MATMUL_FC, GPT2_OP_GELU,
    GPT2_OP_MATMUL_FCPROJ, GPT2_OP_MATMUL_LM_HEAD, GPT2_OP_SOFTMAX_XENT,
    GPT2_NUM_OPS
} GPT2Op;

extern const char *const gpt2_op_names[GPT2_NUM_OPS];  // "matmul qkv", ...

// Seconds of each op kind, summed over every call: wall time on the CPU
// (models/gpt2_cpu.c), the time between CUDA events around each call on a GPU
// (models/gpt2_cuda.cu, which then waits for every op: no two overlap). A block's
// forward run again by recompute counts as forward. The residual's backward is the
// identity, done in place by its callers: it stays 0, but for --dropout's masks of
// the residual branches, which count as the residual (the embeddings' as the
// encoder, the attention probabilities' as the attention). On a GPU a fused pair
// counts once: residual + layernorm as the layernorm, bias + GELU as the matmul.
typedef struct {
    double forward_s[GPT2_NUM_OPS];
    double backward_s[GPT2_NUM_OPS];
} GPT2OpTimes;

// One step's time outside the model's ops, in the order the step runs them.
typedef struct {
    double adamw_s;       // AdamW over every parameter
    double zero_grads_s;  // the zeroing of the gradients for the next step
    double step_s;        // the whole step, ops and everything between them
} GPT2StepTimes;

// Prints a step's table (bench_step, bench_gpu): forward and backward ms per op
// kind and its share of the step; "other" is what no row timed (the zeroing of
// the backward's scratch, the loss's mean, the calls between the ops).
void gpt2_print_op_times(const GPT2OpTimes *ops, const GPT2StepTimes *step);

typedef struct {
    GPT2Layout layout;
    int B, T;                  // rows of one micro-batch (B/N/K of the global batch) and sequence length
    int recompute;             // 1: forward keeps each block's input only; backward recomputes the rest
    AttentionKeeps attention;  // probabilities, or (--fused-attention) a log-sum-exp per row
    ClassifierKeeps classifier;  // probabilities, or (--fused-classifier) the gradient over the logits
    int grad_accum;            // micro-batches per optimizer step (--grad-accum): each backward adds
                               // 1/grad_accum of its batch's mean-loss gradient, so K of them sum to the mean
    DType param_dtype;         // of the values in params[t] (--precision; fp32 unless set after gpt2_init)
    DType grad_dtype;          // of the gradients in grads[t] (--reduce-dtype)
    float dropout;             // --dropout P (dropout.h): 0, none
    uint64_t dropout_seed;     // --seed: with the step and the rows, the masks' key
    int dropout_step;          // the training step the batch is for; 0: evaluation, nothing dropped
    int row0;                  // the global batch row of this micro-batch's row 0
    void **params;             // (num_tensors) where each tensor's values are
    void **grads;              // (num_tensors) where each tensor's gradient accumulates
    // What the ops read and write in fp32 while a unit runs: params[t] and
    // grads[t] themselves where they are fp32, else fp32 copies of the unit's
    // tensors, made when the unit starts (widened parameters; zeroed gradients,
    // which are rounded and added into grads[t] when its backward ends); NULL
    // where no op reads it in fp32 (a bf16 run's products' weights and
    // embedding tables: gpt2_kept_param).
    float **unit_params, **unit_grads;  // (num_tensors)
    float *widened_params, *widened_grads;  // the copies, while a unit runs (NULL: none)
    size_t widened_params_count, widened_grads_count;  // their elements
    MemAccount *mem;           // where the copies are counted (params_gathered, grads_gathered)
    GPT2Activations acts;
    float *acts_memory;
    size_t num_acts;
    int *batch;                // (3,B,T) the model's copy of its batch, on its device:
    const int *inputs;         // (B,T) token ids (points into batch)
    const int *targets;        // (B,T) next-token ids (points into batch), or NULL
    const int *positions_by_token; // (B*T) positions sorted by token id (points into batch)
    float mean_loss;           // mean of losses over the micro-batch's B*T tokens
    GPT2OpTimes *op_times;     // NULL (off), or where the ops add their time (bench_step, bench_gpu)
    struct SimClock *clock;    // NULL, or the virtual clock the dry device's units charge their compute to (sim_clock.h)
} GPT2;

// "d2", "d4", "d6", "d12" (d12 = GPT-2 124M); vocab_size overrides V (0: 50257).
// Returns 0, or -1 for an unknown name.
int gpt2_config_preset(const char *name, int vocab_size, GPT2Config *out);
// Exits with a message naming `source` when the config is inconsistent, or so
// large that its sizes overflow (dimensions and tensor ids are ints) or its
// parameters exceed GPT2_MAX_PARAM_BYTES; the message gives the size in GB.
void gpt2_config_validate(const GPT2Config *config, const char *source);
#define GPT2_MAX_PARAM_BYTES 1125899906842624.0  // 2^50: far beyond any machine, safe for size_t arithmetic
// Parameter elements of a validated config, without building its layout.
size_t gpt2_config_num_params(const GPT2Config *config);
// Host bytes of the layout's tables (one GPT2Tensor per tensor, per-unit lists).
size_t gpt2_layout_table_bytes(const GPT2Config *config);

void gpt2_layout_init(GPT2Layout *layout, GPT2Config config);
// Groups the blocks into units of consecutive blocks (the embedding and the head
// stay units of their own): J = unit_blocks blocks each, the last unit the rest;
// or, with min_params > 0, as many blocks as it takes for a unit to hold at least
// min_params parameters (after PyTorch's size-based auto-wrap, which wraps modules
// by the size of their subtree; the last unit holds the rest). unit_blocks 1 and
// min_params 0: a unit per block, as gpt2_layout_init.
void gpt2_layout_group_blocks(GPT2Layout *layout, int unit_blocks, size_t min_params);
void gpt2_layout_free(GPT2Layout *layout);
// Tensor id of kind `kind` in block `layer` (layer ignored for wte, wpe, lnf).
int gpt2_tensor_id(const GPT2Layout *layout, GPT2TensorKind kind, int layer);
// Points table[t] at each tensor inside one flat buffer of fp32 in llm.c's layout.
void gpt2_point_into_flat(const GPT2Layout *layout, float *flat, void **table);

// Deterministic initial values of rows [row_begin, row_begin + row_count) of
// tensor t: any rank can make any slice without making the rest.
void gpt2_init_rows(const GPT2Layout *layout, int t, uint64_t seed, int row_begin, int row_count,
                    float *out);

// Allocates activations for a (B, T) batch; the pointer tables start as NULL.
// recompute: each block's backward first runs its forward again (--recompute),
// so the per-layer activations other than the blocks' outputs (residual3) are
// held for one layer, not L. attention: what the attention keeps (LOGSUMEXP only
// where gpt2_device_fuses_attention); classifier: what the classifier keeps.
void gpt2_init(GPT2 *model, GPT2Config config, int B, int T, int recompute, AttentionKeeps attention,
               ClassifierKeeps classifier, MemAccount *acct);
void gpt2_free(GPT2 *model, MemAccount *acct);
// The loss's gradient with respect to each token's loss: the loss is the mean
// over this rank's B x T tokens of all its grad_accum micro-batches.
float gpt2_dloss(const GPT2 *model);

// order: (n) the positions 0..n-1 sorted by their token id (< V), positions of
// the same token in increasing order (a counting sort). The GPU's embedding
// backward sums each token's rows in this fixed order, so its result does not
// depend on how the work is scheduled.
void gpt2_positions_by_token(int *order, const int *inputs, size_t n, int V);
// Copies a host batch to the model's device. inputs, targets: (B,T); targets
// may be NULL (no loss). Ids are checked < V. inputs NULL: the dry run's training
// batch, its shapes alone (the dry device reads no token; none is allocated).
void gpt2_set_batch(GPT2 *model, const int *inputs, const int *targets);
void gpt2_forward_unit(GPT2 *model, int unit);
void gpt2_backward_unit(GPT2 *model, int unit);
// 1 if this build's device has the fused attention (a GPU's; the dry device's,
// so that the planner can count its activations), 0 on the CPU.
int gpt2_device_fuses_attention(void);
// 1 if this build's embedding backward sums each token's positions before adding
// them to the gradient, and so needs the batch's positions sorted by token
// (positions_by_token): a GPU's always, the CPU's into bf16 gradients
// (gpt2_kept_grad_dtype); 0 on the dry device. Else gpt2_set_batch leaves
// positions_by_token NULL.
int gpt2_device_sums_by_token(const GPT2 *model);
// The ops of one unit on this build's device (gpt2_cpu.c, gpt2_cuda.cu), on
// unit_params and unit_grads; gpt2_forward_unit and gpt2_backward_unit set
// those up around them.
void gpt2_device_forward(GPT2 *model, int unit);
void gpt2_device_backward(GPT2 *model, int unit);
// A bf16 run multiplies bf16 operands (a GPU's tensor cores; on a CPU oneDNN's bf16 kernels, or
// the operands widened to fp32: models/products.c, bf16_products.h): the weight as kept, and the activations each
// product first rounds into a buffer of their own, each part GPT2_OPERAND_ALIGN
// elements aligned (128 bytes, so that cuBLAS may take its fastest kernels).
// Elements of a product of (rows, C) by (OC, C): its inp (rows, C), and in the
// backward its dout (rows, OC) too; and of the largest product of a unit's pass
// (with recompute the forward runs in the backward too); 0 in an fp32 run.
// Counted as activations while the unit runs.
#define GPT2_OPERAND_ALIGN 64
size_t gpt2_product_operands(size_t rows, int C, int OC, int backward);
size_t gpt2_unit_operands(const GPT2 *model, int unit, int backward);
// A bf16 run's products for one pass of a unit (NULL in an fp32 run and for the
// embedding): *storage with its operands buffer, gpt2_unit_operands elements taken
// from the account as activations (not zeroed: each part is written before it is
// read). gpt2_close_products gives the buffer back.
const Bf16Products *gpt2_open_products(GPT2 *model, int unit, int backward, Bf16Products *storage);
void gpt2_close_products(GPT2 *model, int unit, int backward, const Bf16Products *products);
// A tensor and its gradient as the ops that take them as kept read and add into
// them (the products' weights, matmul_forward and matmul_backward; the
// embedding's tables, encoder_forward and encoder_backward): unit_params[t] and
// unit_grads[t] in an fp32 run; in a bf16 run the tensors as kept, params[t]
// (bf16) and grads[t], of gpt2_kept_grad_dtype: grad_dtype (and fp32 where the
// parameters are fp32).
const void *gpt2_kept_param(const GPT2 *model, int t);
void *gpt2_kept_grad(const GPT2 *model, int t);
DType gpt2_kept_grad_dtype(const GPT2 *model);

// Block `layer`'s activations: its own slices, or with recompute the one shared
// set (its input and output, residual3, are always its own).
GPT2BlockActs gpt2_block_acts(const GPT2 *model, int layer);

// Site `site` of block `layer`'s dropout (layer 0 for the embeddings) for the
// batch set, made in *storage; NULL when nothing is dropped (no --dropout, or an
// evaluation batch), which is what the ops take for "none".
const Dropout *gpt2_dropout(const GPT2 *model, int layer, DropoutSite site, Dropout *storage);

// Model FLOPs of one forward + backward over B*T tokens: 6 * matmul params *
// tokens plus the attention products (used for GFLOP/s and MFU).
double gpt2_flops_per_step(const GPT2Config *config, int B, int T);

#ifdef __cplusplus
}
#endif

#endif
