// passes.h: the passes of a training step over the model's units, around the
// strategy's hooks (strategy.h). The trainers (train_loop.c) and build/plan's dry
// run (dry_run.h) run this same code: what the plan predicts is what runs.
#ifndef SHARDLAB_PASSES_H
#define SHARDLAB_PASSES_H

#include "models/gpt2.h"
#include "comm/comm.h"
#include "kit/strategy.h"
#include "run/trace.h"

// for u = 0 .. U-1: before_forward(u), the model's forward of u, after_forward(u, backward_follows):
// 1 in training, whose backward_pass comes next, 0 in a forward-only pass (evaluation).
// `trace` (NULL: none) gets a span for each.
void forward_pass(GPT2 *model, Strategy *s, Trace *trace, int backward_follows);
// for u = U-1 .. 0: before_backward(u), the model's backward of u, after_backward(u, last).
void backward_pass(GPT2 *model, Strategy *s, Trace *trace, int last_micro_batch);
// finish_grads(), then the account's phase is the optimizer's until the next pass.
// Each pass sets the phase of model->mem (mem_set_phase) as it goes, for the timeline.
void finish_pass(GPT2 *model, Strategy *s, Trace *trace);
// Before the last micro-batch's backward: with --offload-optimizer and no clip
// the step's AdamW settings are known already, so each offloaded update begins
// as soon as its gradient share is final (resident.h), beside the backward still
// to run; a clip needs the whole gradient's norm first, and they wait for the step.
// early->config must be the step's; early->host_s gains the seconds they take.
void offload_early_begin(RunSettings *run, float clip, OffloadEarly *early);
// With clip > 0 (--grad-clip), the global norm of the averaged gradient (each
// rank's share squared, one all-reduce of a double) and the gradients scaled
// down to clip where the norm is above it; then the strategy's AdamW step (and
// offload_early_begin's settings are forgotten). Returns the norm before
// clipping (NAN without clip).
double optimizer_pass(GPT2 *model, Strategy *s, Comm *comm, float clip, AdamWConfig config, RunSettings *run);

#endif
