// plan: predicts each strategy's memory per rank (ddp, zero1, zero2, zero3,
// fsdp) without training. It replays a run's allocations buffer by buffer (the
// model's, the strategy's resident state, one training step's temporaries, in
// the trainers' order) on a dry account of the same accountant and cache the
// trainers use, with the same partitioner, so its numbers, `reserved` included,
// can be held against a real run's summary.
//   build/plan (--config dN [--vocab V] | --model FILE.bin) --ranks N [--batch B --seq T]
//              [--reshard-after-forward 0|1] [--recompute] [--grad-accum K] [--accum-mode M]
//              [--prefetch K] [--shard-group S] [--precision P] [--reduce-dtype P] [--tsv | --layout]
// --batch defaults to 4 sequences per rank (4N), so any N works as given.
// --tsv prints one line per strategy and rank: strategy, rank, then bytes per
// category (docs/memory.md order), the peak, and the cache's reserved peak.
// Ranks with the same numbers share one line whose rank field is "first-last"
// (ZeRO-3's ranks that own no tensor, once N exceeds the number of tensors).
// --layout prints, instead, which elements of the flat model each rank keeps
// (see print_layout), for the report's sharding picture.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util/cli.h"
#include "../common/util/errors.h"
#include "../common/memory.h"
#include "../common/partition.h"
#include "../common/step_time.h"
#include "../common/strategy.h"
#include "../models/gpt2.h"
#include "../models/gpt2_io.h"

// The trainers' buffers one by one, as device_alloc and device_free make and
// return them in the CPU build, on a dry account (acct->cache.dry: no memory
// behind them): the categories come out as a run's, and so does the cache's
// `reserved`, which depends on the order and the size of every buffer.
static void take(MemAccount *acct, MemCategory category, size_t floats) { mem_alloc_floats(acct, category, floats); }
static void give(MemAccount *acct, MemCategory category, size_t floats) { mem_free_floats(acct, category, NULL, floats); }
// The same for buffers of parameters or gradients, in the run's dtypes (--precision, --reduce-dtype).
static void take_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    mem_alloc_elements(acct, category, count, dtype_size(dtype));
}
static void give_as(MemAccount *acct, MemCategory category, size_t count, DType dtype) {
    mem_free_elements(acct, category, NULL, count, dtype_size(dtype));
}

// What gpt2_init allocates, before any strategy: the activations and the batch.
typedef struct {
    size_t acts;   // floats (gpt2_num_activations)
    size_t batch;  // ints: GPT2_BATCH_ARRAYS x rows x T
} ModelBuffers;

static void take_model(MemAccount *acct, ModelBuffers model) {
    take(acct, MEM_ACTIVATIONS, model.acts);
    mem_alloc_ints(acct, MEM_ACTIVATIONS, model.batch);
}

// gpt2_free, after the strategy has freed its own: the account is empty again.
static void give_model(MemAccount *acct, ModelBuffers model) {
    give(acct, MEM_ACTIVATIONS, model.acts);
    mem_free_ints(acct, MEM_ACTIVATIONS, NULL, model.batch);
}

// How a step runs, beyond the strategy: the trainers' --grad-accum, --accum-mode,
// --prefetch (ZeRO-3, FSDP), --reshard-after-forward (FSDP), --precision and --reduce-dtype.
typedef struct {
    int micro_batches;  // K: forward and backward K times per step
    int sync_each;      // ZeRO-2/3, FSDP: reduce every micro-batch (1) or only the last (0: no-sync)
    int prefetch;       // units ahead whose gathers start early (prefetch_window: at most L)
    int reshard;        // FSDP: free gathered parameters after forward
    DType params;       // --precision: the parameters kept, gathered and moved
    DType grads;        // --reduce-dtype: the gradients
} StepShape;

// resident_init and resident_free (common/resident.c): `count` elements each of
// parameters and gradients (in their dtypes), the fp32 master in a bf16 run, m and v.
static void take_resident(MemAccount *acct, size_t count, const StepShape *shape) {
    take_as(acct, MEM_PARAMS, count, shape->params);
    take_as(acct, MEM_GRADS, count, shape->grads);
    if (shape->params == DTYPE_BF16) take(acct, MEM_OPTIM, count);
    take(acct, MEM_OPTIM, count);
    take(acct, MEM_OPTIM, count);
}

static void give_resident(MemAccount *acct, size_t count, const StepShape *shape) {
    give_as(acct, MEM_PARAMS, count, shape->params);
    give_as(acct, MEM_GRADS, count, shape->grads);
    if (shape->params == DTYPE_BF16) give(acct, MEM_OPTIM, count);
    give(acct, MEM_OPTIM, count);
    give(acct, MEM_OPTIM, count);
}

// The model's open_unit and close_unit (models/gpt2.c) around a unit's ops: in
// bf16, fp32 copies of the unit's parameters and (backward, bf16 gradients) of
// its gradients, freed gradients first.
static void run_unit(const GPT2Layout *layout, int unit, int backward, const StepShape *shape, MemAccount *acct) {
    size_t numel = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) numel += layout->tensors[layout->unit_tensors[unit][i]].numel;
    int widen_params = shape->params == DTYPE_BF16, widen_grads = backward && shape->grads == DTYPE_BF16;
    if (widen_params) take(acct, MEM_PARAMS_GATHERED, numel);
    if (widen_grads) take(acct, MEM_GRADS_GATHERED, numel);
    if (widen_grads) give(acct, MEM_GRADS_GATHERED, numel);
    if (widen_params) give(acct, MEM_PARAMS_GATHERED, numel);
}

// DDP: the resident replica and the units run through a step; nothing else
// (buckets are reduced in place).
static void plan_ddp(const GPT2Layout *layout, const StepShape *shape, MemAccount *acct, ModelBuffers model) {
    take_model(acct, model);
    take_resident(acct, layout->num_params, shape);
    for (int micro = 0; micro < shape->micro_batches; micro++) {
        for (int u = 0; u < layout->num_units; u++) run_unit(layout, u, 0, shape, acct);
        for (int u = layout->num_units - 1; u >= 0; u--) run_unit(layout, u, 1, shape, acct);
    }
    give_resident(acct, layout->num_params, shape);
    give_model(acct, model);
}


// Whether a micro-batch's backward reduces: the last one always, the others in sync-each.
static int reduces_now(const StepShape *shape, int micro) { return micro == shape->micro_batches - 1 || shape->sync_each; }

// ZeRO-2's finish_reduce: the full-size gradients of the tensors homed in `unit` go.
static void give_bucket(const GPT2Layout *layout, int unit, int *held, DType dtype, MemAccount *acct) {
    for (int t = 0; t < layout->num_tensors; t++)
        if (held[t] && layout->tensors[t].home_unit == unit) {
            give_as(acct, MEM_GRADS_GATHERED, layout->tensors[t].numel, dtype);
            held[t] = 0;
        }
}

// ZeRO-1/2, as ddp/zero12.c runs a step: the whole parameter replica (padded to
// N ranges of S), AdamW moments of this rank's range, and gradients whole
// (ZeRO-1) or of the range alone (ZeRO-2). ZeRO-2's full-size gradients live
// from the first backward that writes them until their bucket's reduce is
// waited for, after the next unit's backward (the head's wte until unit 0's);
// with no-sync they live until the last micro-batch's. The all-gather after
// AdamW sends from a copy of the range.
static void plan_zero12(const GPT2Layout *layout, int world, int stage, const StepShape *shape, MemAccount *acct,
                        ModelBuffers model) {
    size_t S = zero12_range_numel(layout->num_params, world), grads = stage == 1 ? layout->num_params : S;
    int bf16 = shape->params == DTYPE_BF16;
    take_model(acct, model);
    take_as(acct, MEM_PARAMS, S * (size_t)world, shape->params);
    take_as(acct, MEM_GRADS, grads, shape->grads);
    if (bf16) take(acct, MEM_OPTIM, S);  // the master of the range
    take(acct, MEM_OPTIM, S);
    take(acct, MEM_OPTIM, S);
    int *held = xcalloc((size_t)layout->num_tensors, sizeof(int));
    for (int micro = 0; micro < shape->micro_batches; micro++) {
        int last = micro == shape->micro_batches - 1;
        for (int u = 0; u < layout->num_units; u++) run_unit(layout, u, 0, shape, acct);
        for (int u = layout->num_units - 1; u >= 0; u--) {
            for (int i = 0; stage == 2 && i < layout->unit_num_tensors[u]; i++) {
                int t = layout->unit_tensors[u][i];
                if (!held[t]) take_as(acct, MEM_GRADS_GATHERED, layout->tensors[t].numel, shape->grads);
                held[t] = 1;
            }
            run_unit(layout, u, 1, shape, acct);
            if (stage == 1 || !reduces_now(shape, micro)) continue;
            // after unit u: unit u+1's bucket is freed, then unit 0's before the next micro-batch
            give_bucket(layout, u + 1, held, shape->grads, acct);
            if (u == 0 && !last) give_bucket(layout, 0, held, shape->grads, acct);
        }
    }
    give_bucket(layout, 0, held, shape->grads, acct);  // finish_grads
    free(held);
    take_as(acct, MEM_COMM_BUFFERS, S, shape->params);
    give_as(acct, MEM_COMM_BUFFERS, S, shape->params);
    give_as(acct, MEM_PARAMS, S * (size_t)world, shape->params);
    give_as(acct, MEM_GRADS, grads, shape->grads);
    if (bf16) give(acct, MEM_OPTIM, S);
    give(acct, MEM_OPTIM, S);
    give(acct, MEM_OPTIM, S);
    give_model(acct, model);
}

// A sharded strategy's temporaries through a step, replayed in the order
// zero3/zero3.c and fsdp/fsdp.c make them: tensor states, and which units have
// a gather or a reduce in flight.
typedef struct {
    const GPT2Layout *layout;
    int world, rank;
    const int *owner;          // ZeRO-3: the owner of each tensor; NULL for FSDP
    const StepShape *shape;
    MemAccount *acct;
    TensorState *state;        // (num_tensors)
    int *has_grad;             // (num_tensors) a full gradient is allocated
    size_t *gather_pack;       // (num_units) FSDP: elements of this rank's part in flight; 0 if none
    int *gathering;            // (num_units) 1 while the unit's gather is in flight
    size_t *reduce_pack;       // (num_units) FSDP: the same for the reduce-scatter
    int *reducing;             // (num_units) 1 while the unit's reduce is in flight
} Replay;

static size_t full_numel(const Replay *r, int t) {
    return r->owner ? r->layout->tensors[t].numel : fsdp_padded_numel(&r->layout->tensors[t], r->world);
}

static size_t slice_numel(const Replay *r, int t) { return fsdp_slice_numel(&r->layout->tensors[t], r->world); }

// ZeRO-3: a temporary per tensor owned elsewhere; FSDP: send and receive buffers.
static void replay_start_gather(Replay *r, int unit) {
    const GPT2Layout *layout = r->layout;
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (r->state[t] != TENSOR_SHARDED) continue;
        if (r->owner && r->owner[t] != r->rank) take_as(r->acct, MEM_PARAMS_GATHERED, full_numel(r, t), r->shape->params);
        if (!r->owner) pack += slice_numel(r, t);
        r->state[t] = TENSOR_GATHERING;
        r->gathering[unit] = 1;
    }
    if (pack == 0) return;
    take_as(r->acct, MEM_COMM_BUFFERS, pack, r->shape->params);
    take_as(r->acct, MEM_COMM_BUFFERS, pack * (size_t)r->world, r->shape->params);
    r->gather_pack[unit] = pack;
}

// FSDP unpacks into full tensors, then frees its buffers.
static void replay_finish_gather(Replay *r, int unit) {
    const GPT2Layout *layout = r->layout;
    if (!r->gathering[unit]) return;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (r->state[t] != TENSOR_GATHERING) continue;
        if (!r->owner) take_as(r->acct, MEM_PARAMS_GATHERED, full_numel(r, t), r->shape->params);
        r->state[t] = TENSOR_GATHERED;
    }
    size_t pack = r->gather_pack[unit];
    if (pack > 0) {
        give_as(r->acct, MEM_COMM_BUFFERS, pack, r->shape->params);
        give_as(r->acct, MEM_COMM_BUFFERS, pack * (size_t)r->world, r->shape->params);
    }
    r->gather_pack[unit] = 0;
    r->gathering[unit] = 0;
}

static void replay_gather_unit(Replay *r, int unit, int direction, int prefetch) {
    replay_start_gather(r, unit);
    for (int k = 1; k <= prefetch; k++) {
        int ahead = unit + direction * k;
        if (ahead >= 0 && ahead < r->layout->num_units) replay_start_gather(r, ahead);
    }
    replay_finish_gather(r, unit);
}

static void replay_release(Replay *r, int unit) {
    for (int i = 0; i < r->layout->unit_num_tensors[unit]; i++) {
        int t = r->layout->unit_tensors[unit][i];
        if (r->state[t] != TENSOR_GATHERED) continue;
        if (!r->owner || r->owner[t] != r->rank) give_as(r->acct, MEM_PARAMS_GATHERED, full_numel(r, t), r->shape->params);
        r->state[t] = TENSOR_SHARDED;
    }
}

static void replay_start_reduce(Replay *r, int unit) {
    size_t pack = 0;
    for (int i = 0; !r->owner && i < r->layout->unit_num_tensors[unit]; i++) pack += slice_numel(r, r->layout->unit_tensors[unit][i]);
    if (pack > 0) {
        take_as(r->acct, MEM_COMM_BUFFERS, pack * (size_t)r->world, r->shape->grads);
        take_as(r->acct, MEM_COMM_BUFFERS, pack, r->shape->grads);
    }
    r->reduce_pack[unit] = pack;
    r->reducing[unit] = 1;
}

// The full gradients go, then FSDP's buffers.
static void replay_finish_reduce(Replay *r, int unit) {
    if (!r->reducing[unit]) return;
    for (int i = 0; i < r->layout->unit_num_tensors[unit]; i++) {
        int t = r->layout->unit_tensors[unit][i];
        give_as(r->acct, MEM_GRADS_GATHERED, full_numel(r, t), r->shape->grads);
        r->has_grad[t] = 0;
    }
    size_t pack = r->reduce_pack[unit];
    if (pack > 0) {
        give_as(r->acct, MEM_COMM_BUFFERS, pack * (size_t)r->world, r->shape->grads);
        give_as(r->acct, MEM_COMM_BUFFERS, pack, r->shape->grads);
    }
    r->reducing[unit] = 0;
}

// One step of ZeRO-3 (owner != NULL) or FSDP: the strategies' hooks around every
// unit, micro-batch after micro-batch, then finish_grads.
static void replay_step(Replay *r, const StepShape *shape) {
    const GPT2Layout *layout = r->layout;
    int units = layout->num_units, prefetch = shape->prefetch;
    int reshard = r->owner ? 1 : shape->reshard;
    for (int micro = 0; micro < shape->micro_batches; micro++) {
        int last = micro == shape->micro_batches - 1;
        for (int u = 0; u < units; u++) {
            replay_gather_unit(r, u, +1, prefetch);
            run_unit(layout, u, 0, shape, r->acct);
            if (reshard) replay_release(r, u);
        }
        for (int u = units - 1; u >= 0; u--) {
            replay_gather_unit(r, u, -1, prefetch);
            for (int i = 0; i < layout->unit_num_tensors[u]; i++) {
                int t = layout->unit_tensors[u][i];
                if (!r->has_grad[t]) take_as(r->acct, MEM_GRADS_GATHERED, full_numel(r, t), shape->grads);
                r->has_grad[t] = 1;
            }
            run_unit(layout, u, 1, shape, r->acct);
            if (reduces_now(shape, micro)) {
                replay_start_reduce(r, u);
                if (prefetch == 0) replay_finish_reduce(r, u);
                if (u + 1 < units) replay_finish_reduce(r, u + 1);
                if (u == 0 && !last) replay_finish_reduce(r, 0);
            }
            replay_release(r, u);
        }
    }
    replay_finish_reduce(r, 0);
}

// ZeRO-3 (owner: each tensor's owner) or FSDP (owner NULL) on rank `rank`:
// resident state, two steps (the second shows the cache reusing the first's
// blocks), then everything freed.
static void plan_sharded(const GPT2Layout *layout, int world, const int *owner, int rank, const StepShape *shape,
                         MemAccount *acct, ModelBuffers model) {
    size_t resident = owner ? zero3_owned_numel(layout, owner, rank)
                            : fsdp_padded_params(layout, world) / (size_t)world;
    Replay r = {.layout = layout, .world = world, .rank = rank, .owner = owner, .shape = shape, .acct = acct,
                .state = xcalloc((size_t)layout->num_tensors, sizeof(TensorState)),
                .has_grad = xcalloc((size_t)layout->num_tensors, sizeof(int)),
                .gather_pack = xcalloc((size_t)layout->num_units, sizeof(size_t)),
                .gathering = xcalloc((size_t)layout->num_units, sizeof(int)),
                .reduce_pack = xcalloc((size_t)layout->num_units, sizeof(size_t)),
                .reducing = xcalloc((size_t)layout->num_units, sizeof(int))};
    take_model(acct, model);
    take_resident(acct, resident, shape);
    for (int step = 0; step < 2; step++) replay_step(&r, shape);
    give_resident(acct, resident, shape);
    give_model(acct, model);
    free(r.state); free(r.has_grad); free(r.gather_pack); free(r.gathering); free(r.reduce_pack); free(r.reducing);
}

// --params P: the model states alone, per rank, for P parameters on N ranks, by
// the ZeRO paper's accounting (its Figure 1): parameters, gradients and
// optimizer state, without activations, temporaries or padding. fp32: 4 + 4 + 8
// bytes per parameter (the parameters are AdamW's master copy; m and v); bf16,
// the paper's mixed precision: 2 + 2 + 12 (bf16 parameters and gradients; fp32
// master weights, m and v), or 2 + 4 + 12 with fp32 gradients.
static void print_model_states(uint64_t P, int world, DType param_dtype, DType grad_dtype) {
    int bf16 = param_dtype == DTYPE_BF16;
    double params = (double)dtype_size(param_dtype), grads = (double)dtype_size(grad_dtype), optim = bf16 ? 12 : 8;
    double N = world, psi = (double)P;
    // what each rung divides by N: ZeRO-1 the optimizer state, ZeRO-2 the gradients too, ZeRO-3 everything
    const struct { const char *name; double params, grads, optim; } rungs[] = {
        {"ddp", params, grads, optim},
        {"zero1", params, grads, optim / N},
        {"zero2", params, grads / N, optim / N},
        {"zero3", params / N, grads / N, optim / N},
        {"fsdp", params / N, grads / N, optim / N},
    };
    printf("model states per rank: P = %llu parameters, N = %d ranks, %s parameters, %s gradients (%g + %g + %g "
           "bytes per parameter); GB = 1e9 bytes\n%-6s %12s %12s %12s %12s\n",
           (unsigned long long)P, world, dtype_name(param_dtype), dtype_name(grad_dtype), params, grads, optim, "",
           "params", "grads", "optim", "total");
    for (size_t i = 0; i < sizeof rungs / sizeof rungs[0]; i++)
        printf("%-6s %12.3f %12.3f %12.3f %12.3f\n", rungs[i].name, rungs[i].params * psi / 1e9,
               rungs[i].grads * psi / 1e9, rungs[i].optim * psi / 1e9,
               (rungs[i].params + rungs[i].grads + rungs[i].optim) * psi / 1e9);
}

// `ranks` is "r", or "first-last" for a run of ranks with the same numbers.
static void print_row(const char *strategy, const char *ranks, const MemAccount *acct, int tsv) {
    if (tsv) {
        printf("%s\t%s", strategy, ranks);
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf("\t%zu", acct->peak[k]);
        printf("\t%zu\t%zu\n", acct->total_peak, mem_reserved_peak_bytes(acct));
        return;
    }
    printf("%-6s %5s", strategy, ranks);
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf(" %15.3f", acct->peak[k] / 1e6);
    printf(" %12.3f %12.3f\n", acct->total_peak / 1e6, mem_reserved_peak_bytes(acct) / 1e6);
}

// ZeRO-3's rows: one per rank that owns a tensor, and one for the ranks that own
// none (when N exceeds the number of tensors), which all hold the same. The
// partition is computed once, so the work grows with the tensors, not with N.
static void print_zero3(const GPT2Layout *layout, int world, const StepShape *shape, ModelBuffers model, int tsv) {
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    zero3_partition(layout, world, owner);
    int owning = world < layout->num_tensors ? world : layout->num_tensors;  // ranks [0, owning) own a tensor
    for (int t = 0; t < layout->num_tensors; t++) CHECK(owner[t] < owning, "rank %d owns a tensor", owner[t]);
    char ranks[32];
    for (int r = 0; r < owning && (tsv || r == 0 || world <= 8); r++) {
        MemAccount acct = {.cache.dry = 1};
        plan_sharded(layout, world, owner, r, shape, &acct, model);
        snprintf(ranks, sizeof ranks, "%d", r);
        print_row("zero3", ranks, &acct, tsv);
    }
    if (owning < world && (tsv || world <= 8)) {
        MemAccount acct = {.cache.dry = 1};
        plan_sharded(layout, world, owner, owning, shape, &acct, model);
        if (owning == world - 1) snprintf(ranks, sizeof ranks, "%d", owning);
        else snprintf(ranks, sizeof ranks, "%d-%d", owning, world - 1);
        print_row("zero3", ranks, &acct, tsv);
    }
    free(owner);
}

// --layout: which elements of the flat model (llm.c's order) each rank keeps
// between steps, for the sharding picture of the report. Lines:
//   tensor NAME BEGIN END            a tensor's elements [BEGIN, END)
//   hold STRATEGY RANK BEGIN END     the rank keeps elements [BEGIN, END) (ZeRO-1/2: of
//                                    the state they shard; their parameters are everywhere)
//   pad STRATEGY RANK AT COUNT       and COUNT zero padding elements after element AT
//                                    (FSDP: of the tensor ending there; ZeRO-1/2: of the model)
static void print_layout(const GPT2Layout *layout, int world) {
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        printf("tensor\t%s\t%zu\t%zu\n", tensor->name, tensor->offset, tensor->offset + tensor->numel);
    }
    for (int r = 0; r < world; r++) printf("hold\tddp\t%d\t0\t%zu\n", r, layout->num_params);
    for (int r = 0; r < world; r++) {  // ZeRO-1/2: the range whose optimizer state (and ZeRO-2 gradient) r owns
        size_t begin, end;
        zero12_range(layout->num_params, world, r, &begin, &end);
        size_t P = layout->num_params, real_end = end < P ? end : P;
        for (int stage = 1; stage <= 2; stage++) {
            if (begin < real_end) printf("hold\tzero%d\t%d\t%zu\t%zu\n", stage, r, begin, real_end);
            if (end > P) printf("pad\tzero%d\t%d\t%zu\t%zu\n", stage, r, P, end - (begin > P ? begin : P));
        }
    }
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    zero3_partition(layout, world, owner);
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        printf("hold\tzero3\t%d\t%zu\t%zu\n", owner[t], tensor->offset, tensor->offset + tensor->numel);
    }
    free(owner);
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        size_t k = (size_t)fsdp_slice_rows(tensor, world), rows = (size_t)tensor->rows, cols = (size_t)tensor->cols;
        for (int r = 0; r < world; r++) {
            size_t first = r * k, last = first + k;  // rows [first, last), some past the end
            size_t real_end = last < rows ? last : rows;
            if (first < rows)
                printf("hold\tfsdp\t%d\t%zu\t%zu\n", r, tensor->offset + first * cols, tensor->offset + real_end * cols);
            size_t padding_rows = last - (first > rows ? first : rows);
            if (last > rows) printf("pad\tfsdp\t%d\t%zu\t%zu\n", r, tensor->offset + tensor->numel, padding_rows * cols);
        }
    }
}

// "ALPHA,GBPS" (seconds, GB/s) -> a Link; `flag` names it in errors.
static Link parse_link(const char *text, const char *flag) {
    double alpha, gbps;
    char end;
    if (sscanf(text, "%lf,%lf%c", &alpha, &gbps, &end) != 2 || !(alpha >= 0) || !(gbps > 0) || !isfinite(alpha) ||
        !isfinite(gbps))
        fatal("%s: '%s' is not ALPHA,GBPS (a latency in seconds >= 0, a bandwidth in GB/s > 0)", flag, text);
    return (Link){alpha, gbps * 1e9};
}

// --calibrate: bench_comm's tables (one run or several, concatenated): a header
// "# bench_comm: N ranks, ...", then per collective "# <name>" and rows of
// bytes, microseconds, ... Fits one link to every row (the default), and each
// kind of collective's own link to its rows (within_op).
static Link calibrate(const char *path, int tsv, Link *within_op) {
    FILE *f = xfopen(path, "r");
    char line[512], name[64];
    int ranks = 0, op = -1, n = 0, capacity = 0, line_number = 0;
    CommOp *ops = NULL;
    int *group = NULL;
    double *bytes = NULL, *seconds = NULL;
    while (fgets(line, sizeof line, f)) {
        double size, micros;
        line_number++;
        if (sscanf(line, "# bench_comm: %d ranks", &ranks) == 1) continue;
        if (sscanf(line, "# %63s", name) == 1) {  // a collective's name starts its rows; column titles do not
            for (int k = 0; k < COMM_BARRIER; k++)
                if (strcmp(name, comm_op_names[k]) == 0) op = k;
            continue;
        }
        if (op < 0 || ranks < 2 || sscanf(line, "%lf %lf", &size, &micros) != 2) continue;
        if (!(isfinite(size) && size > 0 && isfinite(micros) && micros > 0))
            fatal("--calibrate %s:%d: %g bytes in %g us is not a timing (both must be finite and above 0)", path,
                  line_number, size, micros);
        if (n == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            ops = xrealloc(ops, (size_t)capacity * sizeof *ops);
            group = xrealloc(group, (size_t)capacity * sizeof *group);
            bytes = xrealloc(bytes, (size_t)capacity * sizeof *bytes);
            seconds = xrealloc(seconds, (size_t)capacity * sizeof *seconds);
        }
        ops[n] = (CommOp)op, group[n] = ranks, bytes[n] = size, seconds[n] = micros * 1e-6;
        n++;
    }
    fclose(f);
    Link link;
    if (fit_link(ops, group, bytes, seconds, n, &link) != 0)
        fatal("%s: no bench_comm timings at 2 or more ranks and two sizes to fit (run: mpirun -np 2 build/bench_comm "
              "> %s)", path, path);
    if (!tsv) printf("calibrated from %d timings in %s: alpha %.3g s, beta %.3g GB/s\n", n, path, link.alpha, link.beta / 1e9);
    // each kind's rows alone, where they determine a fit of their own
    CommOp *kind_ops = xmalloc((size_t)n * sizeof *kind_ops);
    int *kind_group = xmalloc((size_t)n * sizeof *kind_group);
    double *kind_bytes = xmalloc((size_t)n * sizeof *kind_bytes), *kind_seconds = xmalloc((size_t)n * sizeof *kind_seconds);
    for (int k = 0; k < COMM_BARRIER; k++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (ops[i] == (CommOp)k)
                kind_ops[m] = ops[i], kind_group[m] = group[i], kind_bytes[m] = bytes[i], kind_seconds[m++] = seconds[i];
        if (fit_link(kind_ops, kind_group, kind_bytes, kind_seconds, m, &within_op[k]) == 0 && !tsv)
            printf("  %s alone, %d timings: alpha %.3g s, beta %.3g GB/s\n", comm_op_names[k], m, within_op[k].alpha,
                   within_op[k].beta / 1e9);
    }
    free(kind_ops), free(kind_group), free(kind_bytes), free(kind_seconds);
    free(ops), free(group), free(bytes), free(seconds);
    return link;
}

// --time: each strategy's step at N = 1, 2, 4, ... up to `max_ranks`, with
// `rows` sequences of T tokens per rank at every N (weak scaling).
static void print_step_times(const GPT2Layout *layout, const Machine *machine, int max_ranks, int rows, int T,
                             int prefetch, int shard_group, size_t bytes, int tsv) {
    if (!tsv)
        printf("predicted step (build/plan --time, docs/scale.md): %d x %d tokens per rank, %d ranks per machine, "
               "compute %.3g GFLOP/s per rank%s; links: within %.3g s + bytes / %.3g GB/s, across %.3g s + bytes / "
               "%.3g GB/s\n%-6s %6s %8s %12s %12s %12s %12s %14s\n",
               rows, T, machine->ranks_per_node, machine->flops_per_s / 1e9,
               machine->compute_slots ? " (a machine's ranks share its cores)" : "", machine->within.alpha,
               machine->within.beta / 1e9, machine->across.alpha, machine->across.beta / 1e9, "", "N", "group",
               "compute ms", "comm ms", "exposed ms", "step ms", "tokens/s");
    for (int N = 1;; N = 2 * N < max_ranks ? 2 * N : max_ranks) {  // powers of two, then max_ranks itself
        for (int k = 0; k < STEP_NUM_STRATEGIES; k++) {
            int S = k == STEP_FSDP && shard_group > 0 && N % shard_group == 0 ? shard_group : N;
            StepSetup setup = {.ranks = N, .rows = rows, .seq = T, .prefetch = prefetch, .shard_group = S,
                               .bytes = bytes};
            StepTime t = step_time(layout, (StepStrategy)k, &setup, machine);
            double tokens_per_s = (double)N * rows * T / t.step;
            if (tsv)
                printf("%s\t%d\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\n", step_strategy_names[k], N, S, t.compute, t.comm,
                       t.exposed, t.step, tokens_per_s);
            else
                printf("%-6s %6d %8d %12.3f %12.3f %12.3f %12.3f %14.0f\n", step_strategy_names[k], N, S,
                       1e3 * t.compute, 1e3 * t.comm, 1e3 * t.exposed, 1e3 * t.step, tokens_per_s);
        }
        if (N == max_ranks) break;
    }
}

// A flag given where it changes nothing is refused: whoever gives it expects
// the numbers to follow it. `flags` ends with NULL; `why` completes "FLAG: ...".
static void refuse_flags(const CliSpec *spec, const char *const *flags, const char *why) {
    for (; *flags; flags++)
        if (cli_given(spec, *flags)) fatal("%s: %s; give it without %s", *flags, why, *flags);
}

int main(int argc, char **argv) {
    const char *config_name = NULL, *model_path = NULL;
    int vocab = 0, world = 0, B = 0, T = 64, reshard = 1, tsv = 0, recompute = 0, show_layout = 0;
    int micro_batches = 1, prefetch = 1, shard_group = 0;
    int time_mode = 0, ranks_per_node = 8, compute_slots = 0;
    float tokens_per_s = 0;
    const char *within = "5e-6,300", *across = "1e-5,25", *calibration = NULL;
    const char *accum_mode = "sync-each", *precision = "fp32", *reduce_dtype = NULL;
    uint64_t params_only = 0;
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (d12 is GPT-2 124M)"},
        {"--vocab", "V", CLI_INT, &vocab, 1, 1 << 24, "vocab of a --config model (default 50257)"},
        {"--model", "FILE.bin", CLI_STRING, &model_path, 0, 0, "the shape of an llm.c checkpoint instead"},
        {"--ranks", "N", CLI_INT, &world, 1, 1 << 24, "number of ranks"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 30, "global sequences per step, divisible by N (default 4 per rank: 4N)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 24, "sequence length (default 64)"},
        {"--reshard-after-forward", "0|1", CLI_INT, &reshard, 0, 1, "FSDP's setting (default 1)"},
        {"--recompute", NULL, CLI_SWITCH, &recompute, 0, 0, "the trainers' --recompute: activations of one block, not L"},
        {"--grad-accum", "K", CLI_INT, &micro_batches, 1, 1 << 20, "the trainers' --grad-accum: K micro-batches per step"},
        {"--accum-mode", "sync-each|no-sync", CLI_STRING, &accum_mode, 0, 0, "the trainers' --accum-mode (default sync-each)"},
        {"--prefetch", "K", CLI_INT, &prefetch, 0, 1 << 20, "ZeRO-3's and FSDP's --prefetch (default 1)"},
        {"--shard-group", "S", CLI_INT, &shard_group, 0, 1 << 24,
         "FSDP's --shard-group: hybrid sharding in groups of S ranks (default 0: all N)"},
        {"--params", "P", CLI_UINT64, &params_only, 1, 1e15,
         "instead of a model: the model states per rank for P parameters (the ZeRO paper's Figure 1)"},
        {"--precision", "fp32|bf16", CLI_STRING, &precision, 0, 0,
         "the trainers' --precision: fp32 (4 + 4 + 8 bytes per parameter, default) or bf16 mixed precision (2 + 2 + 12)"},
        {"--reduce-dtype", "fp32|bf16", CLI_STRING, &reduce_dtype, 0, 0,
         "the trainers' --reduce-dtype: the gradients (default: the precision)"},
        {"--time", NULL, CLI_SWITCH, &time_mode, 0, 0,
         "instead: each strategy's predicted step time at N = 1, 2, 4, ... --ranks, --batch/--ranks rows per rank"},
        {"--tokens-per-s", "R", CLI_FLOAT, &tokens_per_s, 0, 1e12,
         "--time: one rank's training rate on this model and --seq, measured (train_single's tokens_per_s)"},
        {"--ranks-per-node", "G", CLI_INT, &ranks_per_node, 1, 1 << 20, "--time: ranks per machine (default 8)"},
        {"--cores-per-node", "C", CLI_INT, &compute_slots, 0, 1 << 20,
         "--time: ranks share a machine's C cores, each at the --tokens-per-s rate alone (default 0: a GPU each)"},
        {"--within", "ALPHA,GBPS", CLI_STRING, &within, 0, 0,
         "--time: the link inside a machine, latency s and GB/s (default 5e-6,300: NVLink-class)"},
        {"--across", "ALPHA,GBPS", CLI_STRING, &across, 0, 0,
         "--time: the link between machines (default 1e-5,25: a 200 Gb/s network per rank)"},
        {"--calibrate", "FILE", CLI_STRING, &calibration, 0, 0,
         "--time: fit the link inside a machine to bench_comm's output in FILE (and each collective's own)"},
        {"--tsv", NULL, CLI_SWITCH, &tsv, 0, 0,
         "one line per strategy and rank (ranks alike share a line \"first-last\"): bytes per category, peak, "
         "reserved peak"},
        {"--layout", NULL, CLI_SWITCH, &show_layout, 0, 0,
         "instead: which elements of the flat model each rank keeps, per strategy (TSV)"},
    };
    CliSpec spec = {.synopsis = "(--config dN [--vocab V] | --model FILE.bin | --params P) --ranks N [--batch B] "
                                "[--seq T] [--precision fp32|bf16] [--reduce-dtype fp32|bf16] "
                                "[--reshard-after-forward 0|1] [--recompute] [--grad-accum K] "
                                "[--accum-mode sync-each|no-sync] [--prefetch K] [--shard-group S] [--tsv | --layout]",
                    .about = "predicts each strategy's memory per rank, and what the allocator reserves, "
                             "without training",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    int given[sizeof options / sizeof options[0]];
    spec.given = given;
    cli_parse_or_exit(&spec, argc, argv);
    static const char *const time_flags[] = {"--tokens-per-s", "--ranks-per-node", "--cores-per-node", "--within",
                                             "--across", "--calibrate", NULL};
    static const char *const step_flags[] = {"--vocab", "--batch", "--seq", "--reshard-after-forward", "--recompute",
                                             "--grad-accum", "--accum-mode", "--prefetch", "--time", "--layout",
                                             "--tsv", NULL};
    static const char *const layout_flags[] = {"--batch", "--seq", "--reshard-after-forward", "--recompute",
                                               "--grad-accum", "--accum-mode", "--prefetch", "--precision",
                                               "--reduce-dtype", "--time", "--tsv", NULL};
    static const char *const unmodelled_in_time[] = {"--grad-accum", "--accum-mode", "--reshard-after-forward",
                                                     "--recompute", NULL};
    if (!time_mode) refuse_flags(&spec, time_flags, "it sets the step-time model of --time");
    if (params_only) refuse_flags(&spec, step_flags, "--params P plans the model states alone");
    if (show_layout) refuse_flags(&spec, layout_flags, "--layout draws where each element lives, nothing else");
    if (time_mode) refuse_flags(&spec, unmodelled_in_time, "the step-time model of --time does not model it");
    if (!world) fatal("--ranks N is required (%s --help)", argv[0]);
    DType param_dtype, grad_dtype;
    if (dtype_parse(precision, &param_dtype) != 0) fatal("--precision: give fp32 or bf16");
    grad_dtype = param_dtype;
    if (reduce_dtype && dtype_parse(reduce_dtype, &grad_dtype) != 0) fatal("--reduce-dtype: give fp32 or bf16");
    if (shard_group == 0) shard_group = world;
    if (shard_group > world || world % shard_group != 0)
        fatal("--shard-group %d does not divide the %d ranks into equal groups", shard_group, world);
    if (params_only) {
        if (config_name || model_path) fatal("--params P plans the model states alone: give it without --config or --model");
        if (shard_group != world) fatal("--shard-group goes with a model (--config or --model), not --params");
        print_model_states(params_only, world, param_dtype, grad_dtype);
        return 0;
    }
    if (!config_name == !model_path)
        fatal("give exactly one of --config dN, --model FILE.bin and --params P (%s --help)", argv[0]);
    if (model_path && vocab) fatal("--vocab goes with --config; a --model file has its own vocab");
    GPT2Config config;
    if (model_path) gpt2_checkpoint_read_config(model_path, &config);
    else if (gpt2_config_preset(config_name, vocab, &config) != 0) fatal("--config: unknown preset '%s'", config_name);
    if (!B) B = 4 * world;
    if (B % world != 0) fatal("--batch %d is not divisible by --ranks %d", B, world);
    if (B / world % micro_batches != 0)
        fatal("--grad-accum %d: each rank's %d rows (--batch %d over %d ranks) do not split into %d micro-batches",
              micro_batches, B / world, B, world, micro_batches);
    if (strcmp(accum_mode, "sync-each") != 0 && strcmp(accum_mode, "no-sync") != 0)
        fatal("--accum-mode: give sync-each or no-sync");
    StepShape shape = {.micro_batches = micro_batches, .sync_each = strcmp(accum_mode, "sync-each") == 0,
                       .prefetch = prefetch, .reshard = reshard, .params = param_dtype, .grads = grad_dtype};
    int rows = B / world / micro_batches;  // the model is built for one micro-batch
    if (T > config.max_seq_len) fatal("--seq %d exceeds the model's maximum %d", T, config.max_seq_len);
    GPT2Layout layout;
    gpt2_layout_init(&layout, config);
    shape.prefetch = prefetch_window(&layout, prefetch);
    if (show_layout) {  // a line per rank and tensor: a picture's worth, not millions
        if (world > 4096) fatal("--layout draws up to 4096 ranks, not %d (use --tsv for the numbers)", world);
        if (shard_group != world) fatal("--layout draws full sharding: give it without --shard-group");
        print_layout(&layout, world);
        gpt2_layout_free(&layout);
        return 0;
    }
    if (time_mode) {
        if (!(tokens_per_s > 0)) fatal("--time needs --tokens-per-s R: one rank's measured tokens/s on this model");
        if (grad_dtype != param_dtype)
            fatal("--reduce-dtype %s: the step-time model of --time moves parameters and gradients in one dtype; "
                  "give it without --reduce-dtype, or equal to --precision", reduce_dtype);
        Machine machine = {.ranks_per_node = ranks_per_node, .compute_slots = compute_slots,
                           .across = parse_link(across, "--across")};
        machine.within = calibration ? calibrate(calibration, tsv, machine.within_op) : parse_link(within, "--within");
        machine.flops_per_s = tokens_per_s * gpt2_flops_per_step(&config, 1, T) / T;
        print_step_times(&layout, &machine, world, B / world, T, shape.prefetch, shard_group < world ? shard_group : 0,
                         dtype_size(param_dtype), tsv);
        gpt2_layout_free(&layout);
        return 0;
    }
    ModelBuffers model = {gpt2_num_activations(&config, rows, T, recompute), GPT2_BATCH_ARRAYS * (size_t)rows * T};
    if (!tsv) {
        double psi = (double)layout.num_params;
        printf("plan: L=%d C=%d NH=%d V=%d, P = %zu parameters, %d ranks, batch %d x %d (%d micro-batch(es) of %d "
               "rows per rank, %s)%s; ZeRO-3 and FSDP prefetch %d unit(s)\n",
               config.num_layers, config.channels, config.num_heads, config.vocab_size, layout.num_params, world,
               B, T, micro_batches, rows, accum_mode, recompute ? ", activations recomputed in backward" : "",
               shape.prefetch);
        printf("ZeRO paper, mixed precision: 16P = %.3f MB per rank without sharding, 16P/N = %.3f MB with stage 3\n",
               16 * psi / 1e6, 16 * psi / world / 1e6);
        printf("peak MB per rank (%s parameters, %s gradients); reserved: what the allocator's cache "
               "holds at its peak, in use + kept for reuse\n%-6s %5s", dtype_name(param_dtype), dtype_name(grad_dtype),
               "", "rank");
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf(" %15s", mem_category_names[k]);
        printf(" %12s %12s\n", "total peak", "reserved");
    }
    MemAccount acct = {.cache.dry = 1};
    plan_ddp(&layout, &shape, &acct, model);
    print_row("ddp", "0", &acct, tsv);
    for (int stage = 1; stage <= 2; stage++) {
        acct = (MemAccount){.cache.dry = 1};
        plan_zero12(&layout, world, stage, &shape, &acct, model);
        print_row(stage == 1 ? "zero1" : "zero2", "0", &acct, tsv);
    }
    print_zero3(&layout, world, &shape, model, tsv);
    acct = (MemAccount){.cache.dry = 1};
    plan_sharded(&layout, shard_group, NULL, 0, &shape, &acct, model);  // hybrid: FSDP's within a group of S
    print_row("fsdp", "0", &acct, tsv);
    if (!tsv)
        printf("(DDP, ZeRO-1, ZeRO-2 and FSDP: every rank alike; ZeRO-3: %s)%s\n",
               world <= 8 ? "each rank" : "rank 0 shown, --tsv for all",
               shard_group < world ? "; FSDP hybrid: sharded within groups of --shard-group ranks" : "");
    gpt2_layout_free(&layout);
    return 0;
}
