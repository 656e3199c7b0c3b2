// passes.c: a training step's passes over the units (passes.h).
#include "run/passes.h"

#include <math.h>

#include "device/device.h"

void forward_pass(GPT2 *model, Strategy *s, Trace *trace, int backward_follows) {
    for (int u = 0; u < model->layout.num_units; u++) {
        double t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_GATHER_FORWARD, u);
        s->before_forward(s->state, u);
        trace_end(trace, t0, "comm", "gather fwd u%d", u);
        t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_FORWARD, u);
        gpt2_forward_unit(model, u);
        trace_end(trace, t0, "compute", "forward u%d", u);
        t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_RELEASE_FORWARD, u);
        s->after_forward(s->state, u, backward_follows);
        trace_end(trace, t0, "comm", "release fwd u%d", u);
    }
    mem_set_phase(model->mem, PHASE_SETUP, -1);
}

void backward_pass(GPT2 *model, Strategy *s, Trace *trace, int last_micro_batch) {
    for (int u = model->layout.num_units - 1; u >= 0; u--) {
        double t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_GATHER_BACKWARD, u);
        s->before_backward(s->state, u);
        trace_end(trace, t0, "comm", "gather bwd u%d", u);
        t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_BACKWARD, u);
        gpt2_backward_unit(model, u);
        trace_end(trace, t0, "compute", "backward u%d", u);
        t0 = trace_begin(trace);
        mem_set_phase(model->mem, PHASE_REDUCE, u);
        s->after_backward(s->state, u, last_micro_batch);
        trace_end(trace, t0, "comm", "reduce u%d", u);
    }
    mem_set_phase(model->mem, PHASE_SETUP, -1);
}

void finish_pass(GPT2 *model, Strategy *s, Trace *trace) {
    double t0 = trace_begin(trace);
    mem_set_phase(model->mem, PHASE_FINISH_GRADS, -1);
    s->finish_grads(s->state);
    mem_set_phase(model->mem, PHASE_OPTIMIZER, -1);
    trace_end(trace, t0, "comm", "finish grads");
}

// The L2 norm of the whole model's averaged gradient, from the shards: each
// rank adds up the squares of its share (every element of the model is in
// exactly one share: DDP's rank 0, ZeRO-1/2's range owner, ZeRO-3's tensor
// owner, FSDP's slice holder; padding is zero), then one all-reduce of that
// double gives every rank the same sum.
static double grad_norm(GPT2 *model, Strategy *s, Comm *comm) {
    GradSpan spans[MAX_GRAD_SPANS];
    int n = s->local_grads(s->state, spans);
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (spans[i].share) sum += device_sum_squares_as(spans[i].grads, spans[i].count, model->grad_dtype);
    return sqrt(comm_all_reduce_double(comm, sum));
}

// Every rank scales the gradient it keeps, DDP's replicas that are not the
// share included, so the replicas stay equal.
static void scale_grads(GPT2 *model, Strategy *s, float factor) {
    GradSpan spans[MAX_GRAD_SPANS];
    int n = s->local_grads(s->state, spans);
    for (int i = 0; i < n; i++) device_scale_as(spans[i].grads, spans[i].count, model->grad_dtype, factor);
}

void offload_early_begin(RunSettings *run, float clip, OffloadEarly *early) {
    run->offload_early = run->offload_optimizer && clip == 0 ? early : NULL;
}

double optimizer_pass(GPT2 *model, Strategy *s, Comm *comm, float clip, AdamWConfig config, RunSettings *run) {
    double norm = NAN;
    if (clip > 0) {
        norm = grad_norm(model, s, comm);
        double factor = clip / (norm + 1e-6);
        if (factor < 1) scale_grads(model, s, (float)factor);
    }
    s->step(s->state, config);
    run->offload_early = NULL;
    return norm;
}
