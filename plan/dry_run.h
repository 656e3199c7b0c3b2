// dry_run.h: one rank of a run, simulated: the trainers' model, strategy and
// passes (passes.h), the very code that trains, on the dry device (device_dry.c:
// buffers accounted, no memory behind them, nothing computed) and a simulated
// network (comm_init_simulated: collectives counted, nothing moved). build/plan
// predicts every strategy's memory, and with a machine its step time, this way,
// for one rank of any N at a time: a change to a strategy file changes the plan
// with it. Linked into build/plan (and its tests) only, with the dry device.
#ifndef SHARDLAB_DRY_RUN_H
#define SHARDLAB_DRY_RUN_H

#include "comm/comm.h"
#include "device/mem_timeline.h"
#include "device/memory.h"
#include "comm/sim_clock.h"
#include "kit/strategy.h"

typedef struct {
    Strategy (*init)(const StrategyContext *ctx);  // ddp_init, zero12_init, zero3_init, fsdp_init
    const void *options;                           // its options (DdpOptions, Zero3Options, FsdpOptions)
    UnitPolicy units;                              // ZeRO-3's and FSDP's units ({0, 0}: a block each)
    AccumMode accum_mode;
    GPT2Config config;
    int rows, seq;       // one micro-batch of one rank: B/N/K rows of T tokens
    int micro_batches;   // K (--grad-accum)
    int recompute;
    AttentionKeeps attention;  // --fused-attention: LOGSUMEXP, the GPU's fused attention
    ClassifierKeeps classifier;  // --fused-classifier: FUSED, no probabilities kept
    float grad_clip;      // --grad-clip (0: none): the norm's all-reduce joins the step
    DType params, grads;  // --precision, --reduce-dtype
    float ema;            // --ema DECAY (0: none): the EMA's bytes join the account
    int offload_optimizer;  // --offload-optimizer: the optimizer state's bytes are the host's
    int world, rank;
    const Machine *machine;  // NULL: memory alone; else the step's time on a virtual clock
    int steps;               // training steps after init (the last is timed and counted)
} DrySetup;

typedef struct {
    MemAccount mem;       // the account once everything is freed again: peaks by category, reserved peak
    StepTime time;        // the last step's (with a machine)
    CommStats last_step;  // the last step's collectives
    CommStats last_step_machines;  // those of them among ranks of more than one machine (with a machine)
    MemTimeline timeline; // the last step's allocations and frees, timed on the virtual clock
} DryResult;

// The caller frees result->timeline (mem_timeline_free).
void dry_run(const DrySetup *setup, DryResult *result);

#endif
