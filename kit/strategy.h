// strategy.h: what a data-parallel strategy must provide. ddp/ddp.c,
// ddp/zero12.c, zero3/ and fsdp/ each implement these functions, with the same
// names and in the same order, and the training loop (run/train_loop.c)
// calls them around the model's units:
//
//   for each of the K micro-batches (--grad-accum K; K = 1 by default):
//     for u = 0 .. U-1:   before_forward(u)  model forward(u)   after_forward(u, 1)
//     for u = U-1 .. 0:   before_backward(u) model backward(u)  after_backward(u, last)
//   finish_grads()        wait for collectives still in flight
//   step()                AdamW on what this rank owns (and its EMA, --ema); gradients zeroed after
//
// Backward adds into the gradients it is given, so micro-batches accumulate.
// An evaluation runs the forward alone, after_forward(u, 0): what a unit gathered
// is released at once, unless the strategy keeps units through every forward
// (FSDP's --reshard-after-forward 0).
// `last` is 1 in the last micro-batch's backward: before it, a strategy may
// keep its gradients local and reduce them once, with the last (no_sync).
//
// Before a unit runs, the strategy has pointed model->params[t] and
// model->grads[t] at full-size buffers for every tensor t the unit reads.
//
// Each strategy file defines these as static functions under these names, in
// this order, helpers before the functions that use them, and ends with its
// <name>_init, which returns STRATEGY_TABLE: so `diff ddp/ddp.c fsdp/fsdp.c`
// shows only what the two strategies do differently.
#ifndef SHARDLAB_STRATEGY_H
#define SHARDLAB_STRATEGY_H

#include <stdint.h>

#include "models/gpt2.h"
#include "models/gpt2_io.h"
#include "comm/comm.h"
#include "device/memory.h"
#include "device/optim.h"
#include "util/cli.h"

// When a strategy whose gradients are sharded reduces them, with K > 1
// micro-batches per step. DDP and ZeRO-1 keep whole gradients anyway, so they
// always accumulate locally and reduce once. ZeRO-2, ZeRO-3 and FSDP reduce K
// times (sync-each), or once while the full gradients of every tensor (4P bytes
// in fp32; FSDP: 4 pad(P)) wait for the last micro-batch (no-sync); ZeRO-3 and
// FSDP also gather the parameters for every micro-batch, K times either way.
typedef enum {
    ACCUM_SYNC_EACH = 0,  // reduce every micro-batch into the shards: K times the traffic
    ACCUM_NO_SYNC,        // keep whole gradients until the last micro-batch: their memory
} AccumMode;

// --offload-optimizer's updates begun before the step (offload_early_begin in
// run/passes.h): the step's AdamW settings, and the host's seconds on them
// inside the backward, which the training loop counts as optimizer time.
typedef struct {
    AdamWConfig config;
    double host_s;
} OffloadEarly;

// The run's settings that what a rank keeps (kit/resident.h) follows: set by the training loop or the
// planner, read by kit/ alone, given to every strategy at init; the last two change within a step.
typedef struct {
    int offload_optimizer;        // --offload-optimizer: AdamW state and the fp32 master in host memory, updated on the CPU
    float ema_decay;              // --ema: the kept weights' moving average's decay, updated after each step; 0: none
    OffloadEarly *offload_early;  // NULL, or from the last micro-batch's backward to the step: offloaded
                                  // updates begin as gradient shares are final
    struct SimClock *clock;       // NULL, or the planner's virtual clock, which offloaded copies and updates advance
} RunSettings;

// What every strategy is given at init.
typedef struct {
    GPT2 *model;                // pointer tables to fill before each unit
    Comm *comm;
    MemAccount *mem;
    ParamSource source;
    const void *options;        // the strategy's own options (StrategyPlugin), e.g. FsdpOptions
    int quiet;                  // no notes on stdout (strategy_note)
    AccumMode accum_mode;       // with several micro-batches: when sharded gradients are reduced
    const RunSettings *run;     // what the kept state follows (NULL: none of it, as a test may give)
} StrategyContext;

// Where a sharded strategy's parameter tensor is between uses: one state machine a tensor, as
// PyTorch FSDP2's FSDPParam.
//
//   SHARDED --gather starts--> GATHERING --its wait--> GATHERED --released (released_after)--> SHARDED
//                                                          \--released by a forward, hpZ on--> SHARDED_POST_FORWARD
//   SHARDED_POST_FORWARD --the backward's gather, inside the node--> GATHERING ...
typedef enum {
    TENSOR_SHARDED = 0,           // only this rank's part of it (perhaps nothing) is here
    TENSOR_GATHERING,             // its gather is in flight (prefetched); not to be read yet
    TENSOR_GATHERED,              // model->params[t] points at the whole tensor
    TENSOR_REPLICATED,            // kept whole on every rank for good (FSDP's --shard-min-numel): never gathered
    TENSOR_SHARDED_POST_FORWARD,  // ZeRO++'s hpZ, from a forward to its backward: the node holds it too, sharded
                                  // among its H ranks (the wire's secondary copy), and the backward gathers it there
} TensorState;

// Whether a tensor in state `state` is to be gathered before it is read (neither here nor on its way).
static inline int tensor_sharded(TensorState state) {
    return state == TENSOR_SHARDED || state == TENSOR_SHARDED_POST_FORWARD;
}

// The number of units ZeRO-3 and FSDP prefetch for --prefetch D: at most the
// blocks' units (L, or fewer with --unit-blocks), so that the head and unit 0,
// which share wte, are never in flight together (a tensor waits in one unit's
// gather at a time).
int prefetch_window(const GPT2Layout *layout, int prefetch);
// prefetch_window for the strategy `name`'s --prefetch, with a note when it is capped.
int strategy_prefetch(const StrategyContext *ctx, const char *name, int prefetch);

// How ZeRO-3 and FSDP group the model's blocks into units, and so how much one
// gather covers (gpt2_layout_group_blocks), as PyTorch FSDP's auto-wrap decides. Fewer,
// larger units mean fewer collectives (less latency), more held at once.
typedef struct {
    int blocks;           // --unit-blocks J: J consecutive blocks a unit (0: not given; one block a unit)
    uint64_t min_params;  // --wrap-min-params PARAMS > 0: blocks join a unit until it holds PARAMS
} UnitPolicy;

// The two flags that set a UnitPolicy `policy`, as entries of a CliOption table.
#define UNIT_POLICY_FLAGS(policy)                                                                     \
    {"--unit-blocks", "J", CLI_INT, &(policy).blocks, 1, 1 << 24,                                     \
     "group J consecutive blocks into one unit: one gather and one reduce for all of them (default 1)"}, \
    {"--wrap-min-params", "PARAMS", CLI_UINT64, &(policy).min_params, 1, 1e15,                         \
     "instead of --unit-blocks: consecutive blocks join a unit until it holds at least PARAMS parameters"}

// NULL, or what is wrong with a policy once parsed.
const char *unit_policy_problem(const UnitPolicy *policy);
// Groups ctx->model's blocks into units by the policy, with a note of the units
// it made. The training loop and the dry run call it before the strategy's init,
// for the strategies that take the flags (StrategyPlugin.units): the strategy
// files only ever see units, however many blocks each holds.
void strategy_group_units(const StrategyContext *ctx, UnitPolicy policy);

// printf on rank 0, unless the run is quiet: what a strategy has to say at init.
void strategy_note(const StrategyContext *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The note of strategy `name` on how unevenly whole tensors split (owner: from whole_tensor_owners):
// the fullest rank's parameter bytes against the mean.
void note_owner_balance(const StrategyContext *ctx, const char *name, const int *owner);

// The rows of one tensor that a rank keeps between steps, for checkpoints:
// pointers to its fp32 parameters (the master copy in a bf16 run) and AdamW
// moments, and the tensor's step count.
typedef struct {
    int row_begin, row_count;
    float *params, *m, *v;  // (row_count, cols) each
    float *ema;             // NULL, or (row_count, cols) the moving average of params (--ema)
    int *adam_step;
    int writes;             // 1 if this rank writes these rows when saving (DDP: rank 0 only);
                            // across ranks, the writers hold every row of the model once
    bf16 *working;          // NULL, or (row_count, cols) a bf16 run's working copy of params
                            // (the fp32 master above), rounded from them again after a load
    void (*done)(void *arg);  // NULL, or called once the rows have been saved or loaded
    void *done_arg;
} LocalRows;

// A flat span of a rank's averaged gradient (local_grads): every element is
// scaled by a clip; a span marked `share` counts in the global norm.
typedef struct {
    void *grads;   // (count) of model->grad_dtype; zero padding may be part of it
    size_t count;
    int share;     // 1: this rank's share of the norm
} GradSpan;
#define MAX_GRAD_SPANS 2  // FSDP with --shard-min-numel: its slices, and the tensors it keeps whole

// The checkpoint code calls this once it is done with rows local_rows gave it.
static inline void local_rows_done(const LocalRows *rows) {
    if (rows->done) rows->done(rows->done_arg);
}

typedef struct {
    const char *name;
    void *state;
    void (*before_forward)(void *state, int unit);
    void (*after_forward)(void *state, int unit, int backward_follows);
    void (*before_backward)(void *state, int unit);
    void (*after_backward)(void *state, int unit, int last_micro_batch);
    void (*finish_grads)(void *state);
    void (*step)(void *state, AdamWConfig config);
    // Writes the whole model in llm.c's flat layout into `flat` on rank 0 (other
    // ranks pass NULL). Used for checkpoints and tests.
    void (*gather_full_model)(void *state, float *flat);
    // Fills *rows and returns 1 if this rank keeps rows of tensor t, else 0.
    // Checkpoints call it on every rank for every tensor, in tensor order, so it
    // may run a collective (ZeRO-1/2 gather the tensor's AdamW moments there),
    // and local_rows_done once they are done with the rows.
    int (*local_rows)(void *state, int t, LocalRows *rows);
    // The averaged gradient this rank keeps after finish_grads, for clipping: all
    // of it, as flat spans (GradSpan), in spans[]; returns how many (at most
    // MAX_GRAD_SPANS). Across ranks the spans marked `share` hold every gradient
    // element of the model once (DDP: rank 0's replica).
    int (*local_grads)(void *state, GradSpan *spans);
    // --ema: exchanges the weights this rank keeps with their moving average, so
    // that the next forward passes (evaluation) and gather_full_model see the
    // average; called again, it gives the weights back, bit for bit.
    void (*swap_ema)(void *state);
    void (*destroy)(void *state);
} Strategy;

// The function table of the strategy defined in this file (see the top).
#define STRATEGY_TABLE(strategy_name, strategy_state)                                                          \
    ((Strategy){.name = (strategy_name), .state = (strategy_state),                                            \
                .before_forward = before_forward, .after_forward = after_forward,                              \
                .before_backward = before_backward, .after_backward = after_backward,                          \
                .finish_grads = finish_grads, .step = step, .gather_full_model = gather_full_model,            \
                .local_rows = local_rows, .local_grads = local_grads, .swap_ema = swap_ema, .destroy = destroy})

// What a trainer plugs into the shared training loop: its strategy, and the
// flags that belong to that strategy alone (FSDP's --reshard-after-forward).
// They are parsed, listed by --help and compared across ranks like the shared
// ones, and reach the strategy as ctx->options.
typedef struct {
    const char *name;
    Strategy (*init)(const StrategyContext *ctx);
    const CliOption *flags;  // (num_flags) writing into *options
    int num_flags;
    const void *options;
    // NULL, or what is wrong with the options once parsed (NULL: nothing)
    const char *(*check_options)(const void *options);
    // NULL, or the --unit-blocks / --wrap-min-params policy (set by flags in the table
    // above) by which the model's blocks are grouped into units before init
    const UnitPolicy *units;
    // NULL, or train_single's --as-ranks N (0: not given): the ranks whose rows the
    // one rank runs as micro-batches of their own (single/single.c)
    const int *as_ranks;
    // NULL, or the option that shards within groups of M consecutive ranks (hybrid;
    // 0: one group of N): build/plan --time takes M where it divides N
    int *shard_group;
    // NULL, or the options of ranks a node shares for ZeRO++'s secondary shards and for its
    // gradients' two hops (0: off): build/plan --time takes each where it divides the
    // sharding ranks into more than one node
    int *node_group, *grads_node_group;
    // NULL, or the option below whose element count a tensor stays whole on every
    // rank (0: none): build/plan --layout draws those tensors whole
    const uint64_t *whole_below;
    void *storage;  // the memory the options and flags live in (strategy_plugin_free frees it)
} StrategyPlugin;

// Each strategy folder's plugin.c defines `StrategyPlugin <folder>_plugin(void)`:
// its options at their defaults and the flags that set them, in storage of their
// own; build/train_<folder> trains with it (examples/train.c), and the registry
// (run/registry.h) names it for the planner and the tools.
#define STRATEGY_PLUGIN(folder) folder##_plugin
void strategy_plugin_free(StrategyPlugin *plugin);

#endif
