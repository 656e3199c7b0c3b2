// resident.h: what a rank keeps between steps: its part of every tensor's
// parameters, gradients and AdamW moments, packed unit by unit in one flat
// layout. The strategies differ only in how much of each tensor that part is:
// all of it (DDP), all or nothing (ZeRO-3), a dim-0 slice (FSDP); or, for
// ZeRO-1/2 (resident_init_range), the whole replica with the AdamW state (and
// ZeRO-2's gradients) of one contiguous range of llm.c's flat order.
//
// In a --precision bf16 run the part also has an fp32 master copy of its
// parameters: AdamW updates the master and rounds it into the bf16 working
// copy (`params`), which is what the model reads and the collectives move.
//
//   bytes per element kept:  params  grads  master  m  v
//   fp32                        4      4      -     4  4   = 16
//   bf16 (--reduce-dtype bf16)  2      2      4     4  4   = 16
//   bf16, --reduce-dtype fp32   2      4      4     4  4   = 18
//
// With --offload-optimizer (RunSettings.offload_optimizer, kit/strategy.h) the master (in fp32 runs
// too), m and v are in host memory (categories host_optim), and AdamW runs on
// the CPU (adamw_step_span, the device's arithmetic): at each step a tensor's
// gradient share goes down into host staging, the CPU updates it, and its
// parameters come back (rounded to bf16 on the host in a bf16 run):
//
//   device:  params  grads                   host:  master  m  v   staging
//   fp32        4      4                               4    4  4   grads 4
//   bf16        2      2                               4    4  4   grads 2 + params 2
//
// When the step's AdamW settings are known before its last backward (no
// --grad-clip: RunSettings.offload_early), the update does not wait for the step.
// Each strategy calls resident_unit_final when a unit's gradient share is final
// (its finish_reduce; train_single: its backward): the unit's gradients start
// down at once, beside the backward of the units below, and the unit that went
// down before it (whose copies had that time to travel) is updated on the CPU
// and starts back up. The step does the same for what is left (everything, with
// a clip) and waits for every parameter to be back. On a GPU, with each unit's
// share final right after its backward (train_single; --prefetch 0):
//
//   device:  backward u3   backward u2       backward u1       backward u0    step: wait
//   link:             u3 down       u2 down, u3 up    u1 down, u2 up   u0 down, u1 up ... u0 up
//   CPU:                           AdamW u3          AdamW u2          AdamW u1 ... AdamW u0
//
// With --ema (RunSettings.ema_decay > 0) the part also has the exponential moving
// average of its fp32 values (the master in a bf16 run), 4 more bytes per element
// (category `ema`), started from the values it is loaded with and moved toward
// them after every AdamW step: each rank averages exactly what it keeps.
#ifndef SHARDLAB_RESIDENT_H
#define SHARDLAB_RESIDENT_H

#include "kit/partition.h"
#include "kit/strategy.h"

typedef struct Resident {
    FlatLayout flat;
    DType param_dtype, grad_dtype;
    void *params;      // (params_numel) param_dtype, in device memory
    void *grads;       // (grads_numel) grad_dtype
    float *master;     // (state_numel) fp32 copy of the kept params when those are bf16 or offloaded, else NULL
    float *m, *v;      // (state_numel) each
    float *ema;        // (state_numel) --ema: the moving average of the fp32 values, or NULL
    float ema_decay;
    AdamWSpan *spans;  // (num_tensors) empty where the rank keeps nothing; offloaded: on the host
    int offload;       // --offload-optimizer: master, m, v and the spans AdamW updates in host memory
    void *host_grads;  // offload: (state_numel) grad_dtype, the gradient share copied down
    bf16 *host_working;  // offload in a bf16 run: (state_numel) the updated params, rounded, on their way up
    void **device_grads, **device_params;  // offload: (num_tensors) where span t's gradients and params are
    int rows_tensor;   // offload: the tensor whose rows resident_rows gave a checkpoint, or -1
    // offload: where a span's update is this step follows from its home unit, as units go down in the
    // backward's order: units >= down_from have started down (num_units: none yet); of those, reduced_unit's
    // gradients are on their way (or down, not yet updated; -1: none), the others updated, coming back up
    int down_from, reduced_unit;
    long reduced_mark; // the copies' mark behind them
    double reduced_down_at;  // build/plan --time: when the last of them is down
    const GPT2 *model; // its layout's home units
    const RunSettings *run;  // offload, the EMA's decay, offload_early, the clock build/plan --time charges
    size_t params_numel, grads_numel, state_numel;  // flat.total each, but for a range (below)
    // a range (ZeRO-1/2): the AdamW state covers [lo, lo + state_numel) of the flat model
    int range, whole_grads;
    size_t lo;
    MemAccount staging;  // whole rows staged for a checkpoint: not training memory
    float *staged;       // (2 or 3, staged_numel) m, v (and the master) of staged_tensor, or NULL
    int staged_tensor;
    size_t staged_numel, staged_at;  // its elements, and where this range's part starts in it
    struct Resident *whole;  // NULL, or tensors kept whole beside this part (FSDP's, kit/replicas.h): stepped,
    int whole_share;         // swapped and spanned with it, their gradients' norm share this flag
} Resident;

// count[t]: the elements of tensor t this rank keeps; the dtypes are ctx->model's, the memory ctx->mem's,
// offload and the EMA as ctx->run says.
void resident_init(Resident *r, const StrategyContext *ctx, const size_t *count);
// ZeRO-1/2: the flat model in llm.c's order, padded to world equal ranges, of
// which rank `rank` keeps the AdamW state (and master) of its range; params are
// the whole replica, grads the whole model (whole_grads: ZeRO-1) or the range.
// The tensors' parts, in params: tensor->offset (flat is not used).
void resident_init_range(Resident *r, const StrategyContext *ctx, int world, int rank, int whole_grads);
// A range's gradient slot for flat element `element` (inside the range unless whole_grads).
void *resident_grad_at(const Resident *r, size_t element);
// A range's tensor t as whole rows for a checkpoint: its moments (and master)
// assembled on rank 0 by a reduce of every range's part (every rank calls it, for
// every tensor in the same order). The rows' `done` takes this rank's part back
// out of them (a load fills them) and frees them.
LocalRows resident_stage_rows(Resident *r, const GPT2Layout *layout, Comm *comm, int t);
// Fills tensor t's part with rows [row_begin, row_begin + row_count) from the source.
void resident_load_rows(Resident *r, const GPT2Layout *layout, const ParamSource *src, int t, int row_begin,
                        int row_count);
// ZeRO-1/2: the whole replica from the source (every rank makes all of it, so
// the replicas start identical), and this rank's range of the master (and EMA).
void resident_load_replica(Resident *r, const ParamSource *src);
// Makes every rank's parts root's: one broadcast of the fp32 values (the master
// in a bf16 run, which every rank then rounds into its working copy).
void resident_broadcast(Resident *r, Comm *comm, int root);
// --eval-ema, --out-model-ema: exchanges the kept fp32 values with their EMA, and
// rounds the working copy of a bf16 run from them; a second call restores both
// bit for bit. A range (ZeRO-1/2) exchanges its range only.
void resident_swap_ema(Resident *r);
// Where tensor t's part starts in params and in grads (a range: in the whole
// replica; its grads NULL but for whole_grads).
void *resident_params(const Resident *r, int t);
void *resident_grads(const Resident *r, int t);
// The unit's gradients side by side (the parts of the tensors at home in the
// unit: DDP's bucket), *count elements of grad_dtype.
void *resident_unit_grads(const Resident *r, int unit, size_t *count);
// Elements of this rank's parts of the unit's tensors: with `only` given, of
// those to be gathered (tensor_sharded: neither here nor on their way); NULL, of
// those at home in the unit, whose gradients its backward finishes (not the head's wte).
size_t resident_unit_numel(const Resident *r, const GPT2Layout *layout, int unit, const TensorState *only);
// The gradient share of every tensor homed in `unit` (its last backward) is
// final: offloaded, with the step's settings known, its update begins (above).
// Otherwise nothing; a second call for a unit does nothing more. Units are final
// in the backward's order: with `unit`, every unit after it (those with nothing
// to reduce may have made no call).
void resident_unit_final(Resident *r, int unit);
// AdamW on every part this rank keeps (and the EMA's move toward the result),
// then zeroes the gradients for the next step. Every tensor's step count
// advances, kept or not, so any rank can report it.
void resident_step(Resident *r, int num_tensors, AdamWConfig config);
// Tensors kept whole on every rank (`whole`, another part's) join this part's steps, EMA swaps and
// gradient spans; `share`: whether their gradients are this rank's share of the norm.
void resident_add_whole(Resident *r, Resident *whole, int share);
// All the gradients this rank keeps, as spans for local_grads (one; two with tensors kept whole);
// returns how many. `share`: whether this part's are its share of the norm.
int resident_grad_spans(const Resident *r, int share, GradSpan *spans);
// This part's gradients, as one span; `share`: whether they are its share of the norm. A range: its averaged gradient, less padding
// (ZeRO-1's other elements hold this rank's own, unreduced partial sums).
GradSpan resident_grad_span(const Resident *r, int share);
// Tensor t's part as rows [row_begin, row_begin + row_count), for checkpoints.
LocalRows resident_rows(Resident *r, int t, int row_begin, int row_count, int writes);
void resident_free(Resident *r, MemAccount *mem);

#endif
