#include "step_time.h"

#include <math.h>
#include <stdlib.h>

#include "partition.h"
#include "strategy.h"
#include "util/errors.h"

const char *const step_strategy_names[STEP_NUM_STRATEGIES] = {"ddp", "zero1", "zero2", "zero3", "fsdp"};

double collective_seconds(CommOp op, double bytes, int ranks, Link link) {
    if (ranks <= 1) return 0;
    double n = ranks;
    switch (op) {
    case COMM_ALL_REDUCE: return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * bytes / link.beta;
    case COMM_REDUCE_SCATTER:
    case COMM_ALL_GATHER: return (n - 1) * link.alpha + (n - 1) / n * bytes / link.beta;
    case COMM_BROADCAST:
    case COMM_REDUCE: return (n - 1) * link.alpha + bytes / link.beta;
    default: return 0;
    }
}

// The rank's two timelines: compute (now) and its link (free once its queue is done).
typedef struct {
    double now, link_free;
    double comm, exposed;
} Timeline;

// Queues a collective of `seconds` on the link; returns when it completes.
static double start(Timeline *tl, double seconds) {
    double begin = tl->now > tl->link_free ? tl->now : tl->link_free;
    tl->link_free = begin + seconds;
    tl->comm += seconds;
    return tl->link_free;
}

static void wait_until(Timeline *tl, double done) {
    if (done <= tl->now) return;
    tl->exposed += done - tl->now;
    tl->now = done;
}

// Forward FLOPs of unit u over `tokens` tokens (backward: twice these), as in
// gpt2_flops_per_step: 2 per multiply-add of the matrix products and attention.
static double unit_forward_flops(const GPT2Layout *layout, int unit, double tokens, int seq) {
    const GPT2Config *c = &layout->config;
    double C = c->channels;
    if (unit == 0) return 0;  // a lookup
    if (unit > c->num_layers) return 2.0 * c->padded_vocab_size * C * tokens;
    return (2.0 * 12.0 * C * C + 4.0 * seq * C) * tokens;
}

// What a step needs of the model and the machine, worked out once.
typedef struct {
    const GPT2Layout *layout;
    const StepSetup *setup;
    const Machine *machine;
    int world_spans;          // the ring of all ranks crosses machines
    double *forward, *backward;  // (num_units) seconds of compute
} Plan;

// The link a collective of kind `op` runs at: between machines, or inside one at
// that kind's own fit if it has one.
static Link group_link(const Machine *m, CommOp op, int group_spans_machines) {
    if (group_spans_machines) return m->across;
    return m->within_op[op].beta > 0 ? m->within_op[op] : m->within;
}

static double home_bytes(const Plan *p, int unit) {
    const GPT2Layout *layout = p->layout;
    double bytes = 0;
    for (int t = 0; t < layout->num_tensors; t++)
        if (layout->tensors[t].home_unit == unit) bytes += (double)layout->tensors[t].numel * p->setup->bytes;
    return bytes;
}

// DDP: each unit's bucket is all-reduced once its backward is done, behind the
// units below; everything is waited for at the end.
static void replay_ddp(const Plan *p, Timeline *tl) {
    int U = p->layout->num_units;
    double last = 0;
    for (int u = 0; u < U; u++) tl->now += p->forward[u];
    for (int u = U - 1; u >= 0; u--) {
        tl->now += p->backward[u];
        last = start(tl, collective_seconds(COMM_ALL_REDUCE, home_bytes(p, u), p->setup->ranks,
                                                 group_link(p->machine, COMM_ALL_REDUCE, p->world_spans)));
    }
    wait_until(tl, last);
}

// ZeRO-1/2: a bucket is one reduce per piece of a tensor inside one range
// (ddp/zero12.c); ZeRO-1 waits for them all at the end, ZeRO-2 for unit u+1's
// after unit u; then the all-gather of the updated ranges.
static void replay_zero12(const Plan *p, Timeline *tl, int stage) {
    const GPT2Layout *layout = p->layout;
    int U = layout->num_units, N = p->setup->ranks;
    size_t P = layout->num_params;
    double *done = xcalloc((size_t)U, sizeof(double));
    for (int u = 0; u < U; u++) tl->now += p->forward[u];
    for (int u = U - 1; u >= 0; u--) {
        tl->now += p->backward[u];
        for (int t = 0; t < layout->num_tensors; t++) {
            const GPT2Tensor *tensor = &layout->tensors[t];
            if (tensor->home_unit != u) continue;
            for (int r = zero12_owner(P, N, tensor->offset); r < N; r++) {
                size_t begin, end;
                if (zero12_overlap(P, N, r, tensor->offset, tensor->numel, &begin, &end) == 0) break;
                done[u] = start(tl, collective_seconds(COMM_REDUCE, (double)(end - begin) * p->setup->bytes, N,
                                                       group_link(p->machine, COMM_REDUCE, p->world_spans)));
            }
        }
        if (stage == 2 && u + 1 < U) wait_until(tl, done[u + 1]);
    }
    for (int u = 0; u < U; u++) wait_until(tl, done[u]);
    double range = (double)zero12_range_numel(P, N) * N * p->setup->bytes;
    Link link = group_link(p->machine, COMM_ALL_GATHER, p->world_spans);
    wait_until(tl, start(tl, collective_seconds(COMM_ALL_GATHER, range, N, link)));
    free(done);
}

// ZeRO-3 and FSDP: a unit's gather, started if it is not on its way yet in this pass.
typedef struct {
    const Plan *plan;
    const Machine *machine;
    int fsdp;
    double *gathered;  // (num_units) when the unit's gather completes; < 0: not started in this pass
    double *reduced;   // (num_units) when the unit's reduce completes; < 0: none in flight
} Sharded;

// Bytes of the unit's tensors padded to S rows' multiples (FSDP's gathers and
// reduce-scatters), or of their slices (hybrid's all-reduce).
static double unit_bytes(const Sharded *s, int unit, int S, int slices) {
    const GPT2Layout *layout = s->plan->layout;
    double bytes = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        const GPT2Tensor *tensor = &layout->tensors[layout->unit_tensors[unit][i]];
        bytes += (double)(slices ? fsdp_slice_numel(tensor, S) : fsdp_padded_numel(tensor, S));
    }
    return bytes * s->plan->setup->bytes;
}

static void start_gather(Sharded *s, Timeline *tl, int unit) {
    const GPT2Layout *layout = s->plan->layout;
    const StepSetup *setup = s->plan->setup;
    if (s->gathered[unit] >= 0) return;
    if (s->fsdp) {  // one all-gather of the unit's padded tensors within the shard group
        int S = setup->shard_group;
        Link link = group_link(s->machine, COMM_ALL_GATHER, S > s->machine->ranks_per_node);
        s->gathered[unit] = start(tl, collective_seconds(COMM_ALL_GATHER, unit_bytes(s, unit, S, 0), S, link));
        return;
    }
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {  // ZeRO-3: a broadcast per tensor
        double bytes = (double)layout->tensors[layout->unit_tensors[unit][i]].numel * setup->bytes;
        s->gathered[unit] = start(tl, collective_seconds(COMM_BROADCAST, bytes, setup->ranks,
                                           group_link(s->machine, COMM_BROADCAST, s->plan->world_spans)));
    }
}

static void start_reduce(Sharded *s, Timeline *tl, int unit) {
    const GPT2Layout *layout = s->plan->layout;
    const StepSetup *setup = s->plan->setup;
    if (s->fsdp) {
        int S = setup->shard_group;
        Link link = group_link(s->machine, COMM_REDUCE_SCATTER, S > s->machine->ranks_per_node);
        s->reduced[unit] = start(tl, collective_seconds(COMM_REDUCE_SCATTER, unit_bytes(s, unit, S, 0), S, link));
        return;
    }
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        double bytes = (double)layout->tensors[layout->unit_tensors[unit][i]].numel * setup->bytes;
        s->reduced[unit] = start(tl, collective_seconds(COMM_REDUCE, bytes, setup->ranks,
                                         group_link(s->machine, COMM_REDUCE, s->plan->world_spans)));
    }
}

// Waits for the unit's reduce, if one is in flight; hybrid FSDP then all-reduces
// the slices across the groups, blocking (fsdp/fsdp.c's finish_reduce).
static void finish_reduce(Sharded *s, Timeline *tl, int unit) {
    const StepSetup *setup = s->plan->setup;
    if (s->reduced[unit] < 0) return;
    wait_until(tl, s->reduced[unit]);
    s->reduced[unit] = -1;
    int S = setup->shard_group, groups = setup->ranks / S;
    if (!s->fsdp || groups == 1) return;
    Link link = group_link(s->machine, COMM_ALL_REDUCE, setup->ranks > s->machine->ranks_per_node);
    wait_until(tl, start(tl, collective_seconds(COMM_ALL_REDUCE, unit_bytes(s, unit, S, 1), groups, link)));
}

// The hooks of zero3/zero3.c and fsdp/fsdp.c (resharding after forward), one
// micro-batch: gather the unit and start the next K units' gathers, compute,
// release; backward the same, downwards, starting each unit's reduce after it
// and waiting for the one above (at once with K = 0).
static void replay_sharded(const Plan *p, const Machine *m, Timeline *tl, int fsdp) {
    int U = p->layout->num_units, K = prefetch_window(p->layout, p->setup->prefetch);
    Sharded s = {.plan = p, .machine = m, .fsdp = fsdp, .gathered = xcalloc((size_t)U, sizeof(double)),
                 .reduced = xcalloc((size_t)U, sizeof(double))};
    for (int pass = 0; pass < 2; pass++) {
        int direction = pass == 0 ? +1 : -1;
        for (int u = 0; u < U; u++) s.gathered[u] = s.reduced[u] = -1;
        for (int i = 0; i < U; i++) {
            int u = pass == 0 ? i : U - 1 - i;
            for (int k = 0; k <= K; k++) {
                int ahead = u + direction * k;
                if (ahead >= 0 && ahead < U) start_gather(&s, tl, ahead);
            }
            wait_until(tl, s.gathered[u]);
            tl->now += pass == 0 ? p->forward[u] : p->backward[u];
            if (pass == 0) continue;
            start_reduce(&s, tl, u);
            if (K == 0) finish_reduce(&s, tl, u);
            if (u + 1 < U) finish_reduce(&s, tl, u + 1);
        }
    }
    finish_reduce(&s, tl, 0);
    free(s.gathered);
    free(s.reduced);
}

StepTime step_time(const GPT2Layout *layout, StepStrategy strategy, const StepSetup *setup, const Machine *machine) {
    int U = layout->num_units, N = setup->ranks;
    CHECK(N >= 1 && setup->shard_group >= 1 && N % setup->shard_group == 0, "step_time: %d ranks in groups of %d",
          N, setup->shard_group);
    int local = N < machine->ranks_per_node ? N : machine->ranks_per_node;
    double rate = machine->flops_per_s;
    if (machine->compute_slots > 0 && local > machine->compute_slots) rate *= (double)machine->compute_slots / local;
    double tokens = (double)setup->rows * setup->seq;
    Plan plan = {.layout = layout, .setup = setup, .machine = machine, .world_spans = N > machine->ranks_per_node,
                 .forward = xcalloc((size_t)U, sizeof(double)), .backward = xcalloc((size_t)U, sizeof(double))};
    double compute = 0;
    for (int u = 0; u < U; u++) {
        plan.forward[u] = unit_forward_flops(layout, u, tokens, setup->seq) / rate;
        plan.backward[u] = 2 * plan.forward[u];
        compute += 3 * plan.forward[u];
    }
    Timeline tl = {0};
    switch (strategy) {
    case STEP_DDP: replay_ddp(&plan, &tl); break;
    case STEP_ZERO1: replay_zero12(&plan, &tl, 1); break;
    case STEP_ZERO2: replay_zero12(&plan, &tl, 2); break;
    case STEP_ZERO3: replay_sharded(&plan, machine, &tl, 0); break;
    case STEP_FSDP: replay_sharded(&plan, machine, &tl, 1); break;
    default: fatal("step_time: strategy %d", (int)strategy);
    }
    free(plan.forward);
    free(plan.backward);
    return (StepTime){.compute = compute, .comm = tl.comm, .exposed = tl.exposed, .step = tl.now};
}

// Each timing is alpha * steps + beta^-1 * bytes moved per rank: a linear least
// squares in (alpha, 1/beta), solved from its 2x2 normal equations.
int fit_link(const CommOp *op, const int *ranks, const double *bytes, const double *seconds, int n, Link *link) {
    double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
    for (int i = 0; i < n; i++) {
        Link unit_alpha = {1, INFINITY}, unit_beta = {0, 1};  // the two columns: steps and bytes per rank
        double x = collective_seconds(op[i], bytes[i], ranks[i], unit_alpha);
        double y = collective_seconds(op[i], bytes[i], ranks[i], unit_beta);
        sxx += x * x, sxy += x * y, syy += y * y, sxt += x * seconds[i], syt += y * seconds[i];
    }
    double det = sxx * syy - sxy * sxy;
    if (n < 2 || fabs(det) <= 1e-12 * sxx * syy) return -1;
    double alpha = (sxt * syy - syt * sxy) / det, inverse_beta = (sxx * syt - sxy * sxt) / det;
    if (alpha < 0) alpha = 0;  // noise on a fast link: latency below what the sizes resolve
    if (inverse_beta <= 0) return -1;
    *link = (Link){alpha, 1 / inverse_beta};
    return 0;
}
