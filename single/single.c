// single.c: the reference, with no strategy at all. One rank holds the whole
// model; AdamW updates everything. Every strategy must train the same model as
// this one.
//
// With --as-ranks N it is the reference of a run at N ranks, bit for bit: rank
// r's rows (r B/N ..) run as micro-batches of their own, with the shapes and
// the thread count that rank has, each into a gradient of its own (`local`,
// one per simulated rank), and the gradients are averaged as the strategies'
// reductions average them (comm.h): summed in rank order 0, 1, ..., N-1, then
// multiplied by 1/N, at the same moments.
//
//   micro-batch k:  rank 0's rows -> local[0]   rank 1's -> local[1]  ...
//   after unit u's backward of rank r:  its gradients to average set aside, local[r] -> sent[r]
//   ... and of rank N-1:  their average, (sent[0] + sent[1] + ...) * (1/N) -> the gradient AdamW reads
//
// (set aside, since rank 0 runs all of its backward before rank 1 starts.) Every
// strategy averages a tensor's gradient once, after the unit it is at home in
// (the tied wte's, the head's and the embedding's added up, after unit 0).
//
// How often, and over which ranks, is what tells the strategies' sums apart,
// so the reference is told:
//   --accum-mode       each micro-batch's (sync-each) or the last one's (no-sync)
//   --as-groups M      within groups of M consecutive ranks, then across the
//                      groups (FSDP's --shard-group M)
//   --as-whole-below NUMEL  tensors under NUMEL elements: at home, over all N
//                      ranks, in place, as DDP (FSDP's --shard-min-numel)
#include <stdlib.h>

#include "kit/kit.h"
#include "single/single.h"

typedef struct {
    GPT2 *model;
    MemAccount *mem;
    Resident resident;  // every tensor whole: the averaged gradient AdamW reads
    SingleOptions opts;
    int as_ranks;       // N simulated ranks (1: plain train_single)
    int sync_each;      // reduce every micro-batch, not only the last
    void **local;       // (as_ranks) each simulated rank's gradient, the model's layout; NULL without --as-ranks
    void **sent;        // (as_ranks) what each sends to be averaged: after unit u, its tensors averaged
                        // then, at unit_sent[u] on
    size_t *unit_sent;  // (num_units + 1)
} State;

// The simulated rank whose rows run now: rows r B/N .. of the step's batch.
static int simulated_rank(const State *s) { return s->model->row0 / (s->model->B * s->model->grad_accum); }

static void *local_grad(const State *s, int r, int t) {
    return dtype_at(s->local[r], s->model->layout.tensors[t].offset, s->model->grad_dtype);
}

// Ranks first .. first + (count-1) stride, summed in that order into the first
// one's, then * 1/count: `at` (numel) in each rank's sent.
static void sum_ranks(State *s, size_t at, size_t numel, int first, int stride, int count) {
    DType dtype = s->model->grad_dtype;
    void *sum = dtype_at(s->sent[first], at, dtype);
    for (int k = 1; k < count; k++) device_add_as(sum, dtype_at(s->sent[first + k * stride], at, dtype), numel, dtype);
    device_scale_as(sum, numel, dtype, 1.0f / (float)count);
}

// Tensor t's part of the ranks' sent, averaged as the strategies' collectives
// average it: into rank 0's (the others are left as scratch).
static void average_ranks(State *s, int t, size_t at) {
    size_t numel = s->model->layout.tensors[t].numel;
    int N = s->as_ranks, M = s->opts.as_groups ? s->opts.as_groups : N;
    if (numel < s->opts.as_whole_below) M = N;                          // kept whole: over all N
    for (int g = 0; g < N / M; g++) sum_ranks(s, at, numel, g * M, 1, M);  // within each group
    if (M < N) sum_ranks(s, at, numel, 0, M, N / M);                    // across the groups
}

// Simulated rank r is past the unit: what it averages now is set aside, and its
// gradient starts again from zero; after the last rank, each average joins the
// gradient AdamW reads. A whole small tensor (DDP's way) instead keeps the
// average as every rank's gradient, to add into, until the last micro-batch.
static void reduce_unit(State *s, int r, int unit, int last_micro_batch) {
    const GPT2Layout *layout = &s->model->layout;
    DType dtype = s->model->grad_dtype;
    size_t at = s->unit_sent[unit];
    for (int i = 0; i < layout->unit_num_home_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        size_t numel = layout->tensors[t].numel;
        device_copy_as(dtype_at(s->sent[r], at, dtype), local_grad(s, r, t), numel, dtype);
        device_zero_as(local_grad(s, r, t), numel, dtype);
        if (r == s->as_ranks - 1) {
            average_ranks(s, t, at);
            void *average = dtype_at(s->sent[0], at, dtype);
            if (numel >= s->opts.as_whole_below || last_micro_batch)
                device_add_as(resident_grads(&s->resident, t), average, numel, dtype);
            else
                for (int q = 0; q < s->as_ranks; q++) device_copy_as(local_grad(s, q, t), average, numel, dtype);
        }
        at += numel;
    }
}

static void before_forward(void *state, int unit) { (void)state; (void)unit; }
static void after_forward(void *state, int unit, int backward_follows) {
    (void)state, (void)unit, (void)backward_follows;
}

// The unit's gradients go into the simulated rank's own.
static void before_backward(void *state, int unit) {
    State *s = state;
    if (!s->local) return;
    const GPT2Layout *layout = &s->model->layout;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        s->model->grads[t] = local_grad(s, simulated_rank(s), t);
    }
}

// Once the last simulated rank is past the unit, the unit's gradients are
// averaged; they are final once its last backward is done (wte's after unit 0):
// an offloaded optimizer may begin its update.
static void after_backward(void *state, int unit, int last_micro_batch) {
    State *s = state;
    if (s->local && (last_micro_batch || s->sync_each)) reduce_unit(s, simulated_rank(s), unit, last_micro_batch);
    if (last_micro_batch && (!s->local || simulated_rank(s) == s->as_ranks - 1)) resident_unit_final(&s->resident, unit);
}
static void finish_grads(void *state) { (void)state; }

static void step(void *state, AdamWConfig config) {
    State *s = state;
    resident_step(&s->resident, s->model->layout.num_tensors, config);
}

static void gather_full_model(void *state, float *flat) {
    State *s = state;
    const GPT2Layout *layout = &s->model->layout;
    for (int t = 0; t < layout->num_tensors; t++)
        device_to_host_widened(flat + layout->tensors[t].offset, s->model->params[t], layout->tensors[t].numel,
                               s->model->param_dtype);
}

static int local_rows(void *state, int t, LocalRows *rows) {
    State *s = state;
    *rows = resident_rows(&s->resident, t, 0, s->model->layout.tensors[t].rows, 1);
    return 1;
}

static int local_grads(void *state, GradSpan *spans) {
    State *s = state;
    return resident_grad_spans(&s->resident, 1, spans);
}

// The EMA of the weights this rank keeps takes their place, or gives it back.
static void swap_ema(void *state) {
    State *s = state;
    resident_swap_ema(&s->resident);
}

static void destroy(void *state) {
    State *s = state;
    for (int r = 0; s->local && r < s->as_ranks; r++) {
        device_free_as(s->mem, MEM_GRADS_GATHERED, s->local[r], s->model->layout.num_params, s->model->grad_dtype);
        device_free_as(s->mem, MEM_COMM_BUFFERS, s->sent[r], s->unit_sent[s->model->layout.num_units],
                       s->model->grad_dtype);
    }
    free(s->local);
    free(s->sent);
    free(s->unit_sent);
    resident_free(&s->resident, s->mem);
    free(s);
}

const char *single_options_problem(const void *options) {
    const SingleOptions *o = options;
    int N = o->as_ranks ? o->as_ranks : 1;
    if (!o->as_ranks && (o->as_groups || o->as_whole_below))
        return "--as-groups and --as-whole-below describe the reductions of --as-ranks N: give it too";
    if (o->as_groups && N % o->as_groups != 0) return "--as-groups M: M must divide --as-ranks N";
    return NULL;
}

Strategy single_init(const StrategyContext *ctx) {
    if (ctx->comm->world != 1) fatal("train_single runs on one rank; use a strategy trainer for %d", ctx->comm->world);
    State *s = xcalloc(1, sizeof *s);
    GPT2 *model = ctx->model;
    const GPT2Layout *layout = &model->layout;
    s->model = model;
    s->mem = ctx->mem;
    if (ctx->options) s->opts = *(const SingleOptions *)ctx->options;
    s->as_ranks = s->opts.as_ranks ? s->opts.as_ranks : 1;
    s->sync_each = ctx->accum_mode == ACCUM_SYNC_EACH;
    size_t *count = xcalloc((size_t)layout->num_tensors, sizeof(size_t));
    for (int t = 0; t < layout->num_tensors; t++) count[t] = layout->tensors[t].numel;
    resident_init(&s->resident, ctx, count);
    free(count);
    for (int t = 0; t < layout->num_tensors; t++) {
        resident_load_rows(&s->resident, layout, &ctx->source, t, 0, layout->tensors[t].rows);
        model->params[t] = resident_params(&s->resident, t);
        model->grads[t] = resident_grads(&s->resident, t);
    }
    if (s->opts.as_ranks) {  // even at N = 1: the average's * 1/1 and its add, as a strategy at one rank
        s->unit_sent = xcalloc((size_t)layout->num_units + 1, sizeof *s->unit_sent);
        for (int u = 0; u < layout->num_units; u++) {
            s->unit_sent[u + 1] = s->unit_sent[u];
            for (int i = 0; i < layout->unit_num_home_tensors[u]; i++)
                s->unit_sent[u + 1] += layout->tensors[layout->unit_tensors[u][i]].numel;
        }
        s->local = xcalloc((size_t)s->as_ranks, sizeof *s->local);
        s->sent = xcalloc((size_t)s->as_ranks, sizeof *s->sent);
        for (int r = 0; r < s->as_ranks; r++) {
            s->local[r] = device_alloc_as(s->mem, MEM_GRADS_GATHERED, layout->num_params, model->grad_dtype);
            s->sent[r] = device_alloc_as(s->mem, MEM_COMM_BUFFERS, s->unit_sent[layout->num_units], model->grad_dtype);
        }
    }
    return STRATEGY_TABLE("single", s);
}
