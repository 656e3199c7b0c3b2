// passes.c: a training step's passes over the units (passes.h).
#include "passes.h"

void forward_pass(GPT2 *model, Strategy *s, Trace *trace) {
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
        s->after_forward(s->state, u);
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
