// plan: predicts each strategy's memory per rank (ddp, zero1, zero2, zero3,
// fsdp), and with --time its step time, without training. It runs the trainers'
// own code (the strategy files, the model, the passes of a step) for one rank of
// N at a time on the dry device and a simulated network (common/dry_run.h):
// every buffer goes through the same accountant and cache the trainers use, but
// no memory stands behind it and nothing is computed or moved, so its numbers,
// `reserved` included, are a real run's, and follow any change to a strategy.
//   build/plan (--config dN [--vocab V] | --model FILE.bin) --ranks N [--batch B --seq T]
//              [--reshard-after-forward 0|1] [--recompute] [--fused-attention] [--fused-classifier]
//              [--grad-accum K] [--accum-mode MODE]
//              [--prefetch D] [--unit-blocks J | --wrap-min-params PARAMS] [--shard-group M]
//              [--shard-min-numel NUMEL] [--precision P] [--reduce-dtype P] [--grad-clip C] [--ema DECAY]
//              [--offload-optimizer]
//              [--tsv | --layout | --traffic | --timeline STRATEGY [--rank R] | --time ...]
// --batch defaults to 4 sequences per rank (4N), so any N works as given.
// --tsv prints one line per strategy and rank: strategy, rank, then bytes per
// category (docs/memory.md order; the host's last), the device's peak, and the cache's reserved peak.
// Ranks with the same numbers share one line whose rank field is "first-last"
// (ZeRO-3's ranks that own no tensor, once N exceeds the number of tensors).
// --layout prints, instead, which elements of the flat model each rank keeps
// (see print_layout), for the report's sharding picture; --traffic every rank's
// collectives in one step; --timeline one rank's step of memory, event by event.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util/cli.h"
#include "../common/util/errors.h"
#include "../common/dry_run.h"
#include "../common/mem_timeline.h"
#include "../common/memory.h"
#include "../common/partition.h"
#include "../common/step_time.h"
#include "../common/strategy.h"
#include "../ddp/ddp.h"
#include "../fsdp/fsdp.h"
#include "../models/gpt2.h"
#include "../models/gpt2_io.h"
#include "../zero3/zero3.h"

// Each rank is a dry run of a step or two, whose loops over the ranks make its
// time grow with N: about 10 s at this many.
#define MAX_SIMULATED_RANKS (1 << 20)
// --traffic runs every rank of every strategy.
#define MAX_TRAFFIC_RANKS 4096

// What every simulated rank of one plan shares: the model, the step's shape,
// the rank count; each strategy adds its init and options, each rank its rank.
typedef struct {
    DrySetup setup;
    int prefetch, reshard, shard_group;  // ZeRO-3's and FSDP's flags (shard_group: M, or N for none)
    uint64_t shard_min_numel;            // FSDP's --shard-min-numel
    UnitPolicy units;                    // ZeRO-3's and FSDP's --unit-blocks, --wrap-min-params
} PlanShape;

// The strategies, by the names the trainers log: each one's init and options.
typedef enum { PLAN_DDP, PLAN_ZERO1, PLAN_ZERO2, PLAN_ZERO3, PLAN_FSDP, PLAN_NUM_STRATEGIES } PlanStrategy;
static const char *const plan_names[PLAN_NUM_STRATEGIES] = {"ddp", "zero1", "zero2", "zero3", "fsdp"};

// One rank of `strategy` under `shape`, run dry (dry_run.h): its account and step.
static DryResult run_rank(const PlanShape *shape, PlanStrategy strategy, int rank, const Machine *machine) {
    DdpOptions ddp = {.zero_stage = strategy == PLAN_ZERO1 ? 1 : strategy == PLAN_ZERO2 ? 2 : 0};
    Zero3Options zero3 = {.prefetch = shape->prefetch};
    FsdpOptions fsdp = {.reshard_after_forward = shape->reshard, .prefetch = shape->prefetch,
                        .shard_group = shape->shard_group, .shard_min_numel = shape->shard_min_numel};
    DrySetup setup = shape->setup;
    setup.rank = rank;
    setup.machine = machine;
    switch (strategy) {
    case PLAN_DDP: setup.init = ddp_init, setup.options = &ddp; break;
    case PLAN_ZERO1:
    case PLAN_ZERO2: setup.init = zero12_init, setup.options = &ddp; break;
    case PLAN_ZERO3: setup.init = zero3_init, setup.options = &zero3, setup.units = shape->units; break;
    default: setup.init = fsdp_init, setup.options = &fsdp, setup.units = shape->units; break;
    }
    DryResult result;
    dry_run(&setup, &result);
    return result;
}

// --params P: the model states alone, per rank, for P parameters on N ranks, by
// the ZeRO paper's accounting (its Figure 1): parameters, gradients and
// optimizer state, without activations, temporaries or padding. fp32: 4 + 4 + 8
// bytes per parameter (the parameters are AdamW's master copy; m and v); bf16,
// the paper's mixed precision: 2 + 2 + 12 (bf16 parameters and gradients; fp32
// master weights, m and v), or 2 + 4 + 12 with fp32 gradients.
// With --offload-optimizer (common/resident.h) the device keeps the parameters
// and gradients alone; the host keeps an fp32 master (in fp32 runs too), m and v,
// 12 bytes, and staging for the gradient share (the gradients' bytes) and, in a
// bf16 run, the parameters on their way up (2): each over the same N as the
// optimizer state.
static void print_model_states(uint64_t P, int world, DType param_dtype, DType grad_dtype, int offload) {
    int bf16 = param_dtype == DTYPE_BF16;
    double params = (double)dtype_size(param_dtype), grads = (double)dtype_size(grad_dtype);
    double optim = bf16 || offload ? 12 : 8, staging = grads + (bf16 ? 2 : 0);
    double device_optim = offload ? 0 : optim, host_optim = offload ? optim : 0, host_staging = offload ? staging : 0;
    double N = world, psi = (double)P;
    // what each rung divides by N: ZeRO-1 the optimizer state, ZeRO-2 the gradients too, ZeRO-3 everything
    const struct { const char *name; double params, grads, optim, shared; } rungs[] = {
        {"ddp", params, grads, device_optim, 1},
        {"zero1", params, grads, device_optim / N, N},
        {"zero2", params, grads / N, device_optim / N, N},
        {"zero3", params / N, grads / N, device_optim / N, N},
        {"fsdp", params / N, grads / N, device_optim / N, N},
    };
    printf("model states per rank: P = %llu parameters, N = %d ranks, %s parameters, %s gradients (%g + %g + %g "
           "bytes per parameter%s); GB = 1e9 bytes\n%-6s %12s %12s %12s %12s",
           (unsigned long long)P, world, dtype_name(param_dtype), dtype_name(grad_dtype), params, grads, optim,
           offload ? ", the optimizer state offloaded to the host" : "", "", "params", "grads", "optim", "total");
    if (offload) printf(" %12s %12s", "host optim", "host staging");
    printf("\n");
    for (size_t i = 0; i < sizeof rungs / sizeof rungs[0]; i++) {
        printf("%-6s %12.3f %12.3f %12.3f %12.3f", rungs[i].name, rungs[i].params * psi / 1e9,
               rungs[i].grads * psi / 1e9, rungs[i].optim * psi / 1e9,
               (rungs[i].params + rungs[i].grads + rungs[i].optim) * psi / 1e9);
        if (offload)
            printf(" %12.3f %12.3f", host_optim / rungs[i].shared * psi / 1e9, host_staging / rungs[i].shared * psi / 1e9);
        printf("\n");
    }
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
static void print_zero3(const GPT2Layout *layout, const PlanShape *shape, int tsv) {
    int world = shape->setup.world;
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    zero3_partition(layout, world, owner);
    int owning = world < layout->num_tensors ? world : layout->num_tensors;  // ranks [0, owning) own a tensor
    for (int t = 0; t < layout->num_tensors; t++) CHECK(owner[t] < owning, "rank %d owns a tensor", owner[t]);
    char ranks[32];
    for (int r = 0; r < owning && (tsv || r == 0 || world <= 8); r++) {
        DryResult result = run_rank(shape, PLAN_ZERO3, r, NULL);
        snprintf(ranks, sizeof ranks, "%d", r);
        print_row("zero3", ranks, &result.mem, tsv);
        mem_timeline_free(&result.timeline);
    }
    if (owning < world && (tsv || world <= 8)) {
        DryResult result = run_rank(shape, PLAN_ZERO3, owning, NULL);
        if (owning == world - 1) snprintf(ranks, sizeof ranks, "%d", owning);
        else snprintf(ranks, sizeof ranks, "%d-%d", owning, world - 1);
        print_row("zero3", ranks, &result.mem, tsv);
        mem_timeline_free(&result.timeline);
    }
    free(owner);
}

// --layout: which elements of the flat model (llm.c's order) each rank keeps
// between steps, for the sharding picture of the report. Lines:
//   tensor NAME BEGIN END            a tensor's elements [BEGIN, END)
//   hold STRATEGY RANK BEGIN END [TENSOR]  the rank keeps elements [BEGIN, END) (ZeRO-1/2: of
//                                    the state they shard; their parameters are everywhere);
//                                    ZeRO-3 and FSDP name the tensor they are of
//   pad STRATEGY RANK AT COUNT       and COUNT zero padding elements after element AT
//                                    (FSDP: of the tensor ending there; ZeRO-1/2: of the model)
static void print_layout(const GPT2Layout *layout, int world, uint64_t shard_min_numel) {
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
        printf("hold\tzero3\t%d\t%zu\t%zu\t%s\n", owner[t], tensor->offset, tensor->offset + tensor->numel, tensor->name);
    }
    free(owner);
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        size_t k = (size_t)fsdp_slice_rows(tensor, world), rows = (size_t)tensor->rows, cols = (size_t)tensor->cols;
        for (int r = 0; r < world && tensor->numel < shard_min_numel; r++)  // kept whole on every rank
            printf("hold\tfsdp\t%d\t%zu\t%zu\t%s\n", r, tensor->offset, tensor->offset + tensor->numel, tensor->name);
        for (int r = 0; r < world && tensor->numel >= shard_min_numel; r++) {
            size_t first = r * k, last = first + k;  // rows [first, last), some past the end
            size_t real_end = last < rows ? last : rows;
            if (first < rows)
                printf("hold\tfsdp\t%d\t%zu\t%zu\t%s\n", r, tensor->offset + first * cols, tensor->offset + real_end * cols,
                       tensor->name);
            size_t padding_rows = last - (first > rows ? first : rows);
            if (last > rows) printf("pad\tfsdp\t%d\t%zu\t%zu\n", r, tensor->offset + tensor->numel, padding_rows * cols);
        }
    }
}

// "ALPHA,GBPS" (seconds, GB/s) -> a Link; `flag` names it in errors.
static Link parse_link(const char *text, const char *flag) {
    double alpha, gbps;
    char end;
    if (sscanf(text, "%lf,%lf%c", &alpha, &gbps, &end) != 2 || !(alpha >= 0 && alpha <= 1) ||
        !(gbps >= 1e-3 && gbps <= 1e6))
        fatal("%s: '%s' is not ALPHA,GBPS (a latency of 0 to 1 s, a bandwidth of 0.001 to 1e6 GB/s)", flag, text);
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

// --time: each strategy's step at N = 1, 2, 4, ... up to `max_ranks`, with the
// same rows per rank at every N (weak scaling): rank 0 of each, run dry on the
// virtual clock of `machine`. FSDP's --shard-group M applies where M divides N.
static void print_step_times(const PlanShape *plan, const Machine *machine, int max_ranks, int tsv) {
    const DrySetup *d = &plan->setup;
    char offload_note[160] = "";
    if (d->offload_optimizer)
        snprintf(offload_note, sizeof offload_note, "; optimizer offloaded: host link %.3g s + bytes / %.3g GB/s, "
                 "CPU AdamW %.3g GB/s", machine->host.alpha, machine->host.beta / 1e9, machine->host_memory / 1e9);
    if (!tsv)
        printf("predicted step (build/plan --time, docs/scale.md): %d x %d tokens per rank, %d ranks per machine, "
               "compute %.3g GFLOP/s per rank%s; links: within %.3g s + bytes / %.3g GB/s, across %.3g s + bytes / "
               "%.3g GB/s%s\n%-6s %6s %8s %12s %12s %12s %12s %12s %14s\n",
               d->rows * d->micro_batches, d->seq, machine->ranks_per_node, machine->flops_per_s / 1e9,
               machine->compute_slots ? " (a machine's ranks share its cores)" : "", machine->within.alpha,
               machine->within.beta / 1e9, machine->across.alpha, machine->across.beta / 1e9, offload_note, "", "N",
               "group", "compute ms", "comm ms", "exposed ms", "offload ms", "step ms", "tokens/s");
    for (int N = 1;; N = 2 * N < max_ranks ? 2 * N : max_ranks) {  // powers of two, then max_ranks itself
        for (int k = 0; k < PLAN_NUM_STRATEGIES; k++) {
            PlanShape shape = *plan;
            shape.setup.world = N;
            int M = k == PLAN_FSDP && N % plan->shard_group == 0 ? plan->shard_group : N;
            shape.shard_group = M;
            DryResult result = run_rank(&shape, (PlanStrategy)k, 0, machine);
            StepTime t = result.time;
            mem_timeline_free(&result.timeline);
            double tokens_per_s = (double)N * d->rows * d->micro_batches * d->seq / t.step;
            if (tsv)  // the offload's seconds last: the columns before it keep their places
                printf("%s\t%d\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\n", plan_names[k], N, M, t.compute, t.comm,
                       t.exposed, t.step, tokens_per_s, t.offload);
            else
                printf("%-6s %6d %8d %12.3f %12.3f %12.3f %12.3f %12.3f %14.0f\n", plan_names[k], N, M, 1e3 * t.compute,
                       1e3 * t.comm, 1e3 * t.exposed, 1e3 * t.offload, 1e3 * t.step, tokens_per_s);
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

// --timeline: the events of one rank's last step (the trainers keep the same one
// in their summary), one line each, then the moment the total peaked.
static void print_timeline(const PlanShape *shape, const char *name, int rank, const CliSpec *spec) {
    int k = 0;
    while (k < PLAN_NUM_STRATEGIES && strcmp(name, plan_names[k]) != 0) k++;
    if (k == PLAN_NUM_STRATEGIES) fatal("--timeline: '%s' is not a strategy (give ddp, zero1, zero2, zero3 or fsdp)", name);
    // the flags of the strategies that take them: given for another, they would change nothing
    static const char *const fsdp_only[] = {"--shard-group", "--reshard-after-forward", "--shard-min-numel", NULL};
    static const char *const sharded_only[] = {"--prefetch", "--unit-blocks", "--wrap-min-params", NULL};
    if (k != PLAN_FSDP) refuse_flags(spec, fsdp_only, "only FSDP takes it");
    if (k != PLAN_FSDP && k != PLAN_ZERO3) refuse_flags(spec, sharded_only, "only ZeRO-3 and FSDP take it");
    if (rank >= shape->setup.world) fatal("--rank %d: the ranks are 0..%d", rank, shape->setup.world - 1);
    DryResult result = run_rank(shape, (PlanStrategy)k, rank, NULL);
    const MemTimeline *t = &result.timeline;
    printf("# %s, rank %d of %d: step %d's memory events (the last of %d), bytes\n# start:", name, rank,
           shape->setup.world, shape->setup.steps, shape->setup.steps);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %s %zu", mem_category_names[c], t->start[c]);
    printf("\n# event\tphase\tunit\tcategory\tbytes\ttotal\n");
    for (size_t i = 0; i < t->count; i++) {
        const MemEvent *e = &t->events[i];
        printf("%zu\t%s\t%d\t%s\t%lld\t%zu\n", i, mem_phase_names[e->phase], e->unit, mem_category_names[e->category],
               e->bytes, e->total);
    }
    size_t total, held[MEM_NUM_CATEGORIES];
    long at = mem_timeline_peak(t, &total, held);
    if (at < 0) printf("# peak: %zu bytes, held from the step's start (no event in it):", total);
    else printf("# peak: %zu bytes at event %ld (%s, unit %d):", total, at, mem_phase_names[t->events[at].phase],
                t->events[at].unit);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %s %zu", mem_category_names[c], held[c]);
    printf("\n");
    mem_timeline_free(&result.timeline);
}

// --traffic: the last step's collectives of every strategy on every rank, counted
// as the trainers count them (comm.h's ring model), one line per kind used.
static void print_traffic(const PlanShape *shape) {
    printf("# strategy\trank\tcollective\tcalls\telements\tbytes_sent\tbytes_recv\n");
    for (int k = 0; k < PLAN_NUM_STRATEGIES; k++)
        for (int r = 0; r < shape->setup.world; r++) {
            DryResult result = run_rank(shape, (PlanStrategy)k, r, NULL);
            for (int op = 0; op < COMM_NUM_OPS; op++) {
                const CommCounter *c = &result.last_step.ops[op];
                if (c->calls)
                    printf("%s\t%d\t%s\t%llu\t%llu\t%llu\t%llu\n", plan_names[k], r, comm_op_names[op],
                           (unsigned long long)c->calls, (unsigned long long)c->elements,
                           (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_recv);
            }
            mem_timeline_free(&result.timeline);
        }
}


int main(int argc, char **argv) {
    const char *config_name = NULL, *model_path = NULL;
    int vocab = 0, world = 0, B = 0, T = 64, reshard = 1, tsv = 0, recompute = 0, show_layout = 0, timeline_rank = 0;
    int fused_attention = 0, fused_classifier = 0, offload = 0;
    const char *timeline_name = NULL;
    int show_traffic = 0;
    int micro_batches = 1, prefetch = 1, shard_group = 0;
    uint64_t shard_min_numel = 0;
    UnitPolicy units = {0, 0};
    int time_mode = 0, ranks_per_node = 8, compute_slots = 0;
    float tokens_per_s = 0, grad_clip = 0, ema = 0;
    const char *within = "5e-6,300", *across = "1e-5,25", *calibration = NULL, *host_link = "1e-5,25";
    float cpu_adam = 55;
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
        {"--fused-attention", NULL, CLI_SWITCH, &fused_attention, 0, 0,
         "the GPU trainers' --fused-attention: a log-sum-exp per attention row, not its (T, T) probabilities"},
        {"--fused-classifier", NULL, CLI_SWITCH, &fused_classifier, 0, 0,
         "the trainers' --fused-classifier: no (B, T, Vp) probabilities kept"},
        {"--grad-clip", "C", CLI_FLOAT, &grad_clip, 0, 1e30,
         "the trainers' --grad-clip: the norm's all-reduce (8 bytes) joins each step (default 0: off)"},
        {"--grad-accum", "K", CLI_INT, &micro_batches, 1, 1 << 20, "the trainers' --grad-accum: K micro-batches per step"},
        {"--ema", "DECAY", CLI_FLOAT, &ema, 0, 0.999999,
         "the trainers' --ema: the moving average of the weights each rank keeps (4 bytes per kept parameter)"},
        {"--offload-optimizer", NULL, CLI_SWITCH, &offload, 0, 0,
         "the trainers' --offload-optimizer: the fp32 master and AdamW moments in host memory (docs/offload.md)"},
        {"--accum-mode", "sync-each|no-sync", CLI_STRING, &accum_mode, 0, 0, "the trainers' --accum-mode (default sync-each)"},
        {"--prefetch", "D", CLI_INT, &prefetch, 0, 1 << 20, "ZeRO-3's and FSDP's --prefetch (default 1)"},
        UNIT_POLICY_FLAGS(units),
        {"--shard-group", "M", CLI_INT, &shard_group, 0, 1 << 24,
         "FSDP's --shard-group: hybrid sharding in groups of M ranks (default 0: all N)"},
        {"--shard-min-numel", "NUMEL", CLI_UINT64, &shard_min_numel, 0, 1e15,
         "FSDP's --shard-min-numel: tensors of fewer elements kept whole on every rank (default 0: none)"},
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
        {"--host-link", "ALPHA,GBPS", CLI_STRING, &host_link, 0, 0,
         "--time --offload-optimizer: the link between a rank's device and its host, latency s and GB/s "
         "(default 1e-5,25: an assumption, docs/offload.md)"},
        {"--cpu-adam", "GBPS", CLI_FLOAT, &cpu_adam, 1e-3, 1e6,
         "--time --offload-optimizer: GB/s of state the host's AdamW moves (default 55: measured, docs/offload.md)"},
        {"--calibrate", "FILE", CLI_STRING, &calibration, 0, 0,
         "--time: fit the link inside a machine to bench_comm's output in FILE (and each collective's own)"},
        {"--tsv", NULL, CLI_SWITCH, &tsv, 0, 0,
         "one line per strategy and rank (ranks alike share a line \"first-last\"): bytes per category, peak, "
         "reserved peak"},
        {"--timeline", "STRATEGY", CLI_STRING, &timeline_name, 0, 0,
         "instead: one step's memory events for STRATEGY (ddp, zero1, zero2, zero3, fsdp): phase, unit, category, "
         "bytes, total after; then the peak's moment"},
        {"--rank", "R", CLI_INT, &timeline_rank, 0, 1 << 24, "--timeline: the rank whose step it shows (default 0)"},
        {"--traffic", NULL, CLI_SWITCH, &show_traffic, 0, 0,
         "instead: each strategy's collectives in one step, every rank (TSV: strategy, rank, collective, calls, "
         "elements, bytes sent, bytes received), as the trainers' comm_last_step counts them"},
        {"--layout", NULL, CLI_SWITCH, &show_layout, 0, 0,
         "instead: which elements of the flat model each rank keeps, per strategy (TSV)"},
    };
    CliSpec spec = {.synopsis = "(--config dN [--vocab V] | --model FILE.bin | --params P) --ranks N [--batch B] "
                                "[--seq T] [--precision fp32|bf16] [--reduce-dtype fp32|bf16] "
                                "[--reshard-after-forward 0|1] [--recompute] [--fused-attention] [--fused-classifier] [--grad-accum K] "
                                "[--ema DECAY] [--offload-optimizer] "
                                "[--accum-mode sync-each|no-sync] [--prefetch D] "
                                "[--unit-blocks J | --wrap-min-params PARAMS] [--shard-group M] "
                                "[--shard-min-numel NUMEL] "
                                "[--tsv | --layout | --traffic | --timeline STRATEGY [--rank R]]",
                    .about = "predicts each strategy's memory per rank, and what the allocator reserves, "
                             "without training",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    int given[sizeof options / sizeof options[0]];
    spec.given = given;
    cli_parse_or_exit(&spec, argc, argv);
    static const char *const time_flags[] = {"--tokens-per-s", "--ranks-per-node", "--cores-per-node", "--within",
                                             "--across", "--calibrate", "--host-link", "--cpu-adam", NULL};
    static const char *const step_flags[] = {"--vocab", "--batch", "--seq", "--reshard-after-forward", "--recompute",
                                             "--fused-attention", "--fused-classifier", "--grad-clip", "--ema",
                                             "--shard-min-numel",
                                             "--grad-accum", "--accum-mode", "--prefetch", "--unit-blocks",
                                             "--wrap-min-params", "--time", "--layout",
                                             "--tsv", NULL};
    static const char *const layout_flags[] = {"--batch", "--seq", "--reshard-after-forward", "--recompute",
                                               "--fused-attention", "--fused-classifier", "--grad-clip", "--ema",
                                               "--grad-accum", "--accum-mode", "--prefetch", "--unit-blocks",
                                               "--wrap-min-params", "--precision",
                                               "--reduce-dtype", "--offload-optimizer", "--time", "--tsv", NULL};
    if (!time_mode) refuse_flags(&spec, time_flags, "it sets the step-time model of --time");
    if (params_only) refuse_flags(&spec, step_flags, "--params P plans the model states alone");
    if (show_layout) refuse_flags(&spec, layout_flags, "--layout draws where each element lives, nothing else");
    static const char *const timeline_flags[] = {"--time", "--tsv", "--layout", "--params", "--traffic", NULL};
    static const char *const traffic_flags[] = {"--time", "--tsv", "--layout", "--params", "--ema",
                                                "--fused-attention", "--fused-classifier", "--offload-optimizer",
                                                NULL};
    if (time_mode)
        refuse_flags(&spec, (const char *const[]){"--ema", "--fused-attention", "--fused-classifier", NULL},
                     "it changes the memory, not --time");
    if (!offload)
        refuse_flags(&spec, (const char *const[]){"--host-link", "--cpu-adam", NULL},
                     "it times --offload-optimizer's copies and CPU AdamW");
    if (show_traffic) refuse_flags(&spec, traffic_flags, "--traffic prints each strategy's collectives, nothing else");
    if (timeline_name) refuse_flags(&spec, timeline_flags, "--timeline prints one strategy's step, nothing else");
    else refuse_flags(&spec, (const char *const[]){"--rank", NULL}, "it picks the rank of --timeline");
    if (!show_traffic && !time_mode)
        refuse_flags(&spec, (const char *const[]){"--grad-clip", NULL},
                     "it adds the norm's all-reduce, which only --traffic and --time show");
    if (!world) fatal("--ranks N is required (%s --help)", argv[0]);
    if (offload && ema > 0)
        fatal("--offload-optimizer with --ema: the trainers refuse the two together (the EMA stays beside the "
              "weights on the device); give one of them");
    if (unit_policy_problem(&units)) fatal("%s", unit_policy_problem(&units));
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
        print_model_states(params_only, world, param_dtype, grad_dtype, offload);
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
    if (T > config.max_seq_len) fatal("--seq %d exceeds the model's maximum %d", T, config.max_seq_len);
    if (world > MAX_SIMULATED_RANKS)
        fatal("--ranks %d: the plan runs the strategies for up to %d ranks (--params P answers for any N)", world,
              MAX_SIMULATED_RANKS);
    PlanShape shape = {.setup = {.accum_mode = strcmp(accum_mode, "sync-each") == 0 ? ACCUM_SYNC_EACH : ACCUM_NO_SYNC,
                                 .config = config, .rows = B / world / micro_batches, .seq = T,
                                 .micro_batches = micro_batches, .recompute = recompute,
                                 .attention = fused_attention ? ATTENTION_KEEPS_LOGSUMEXP
                                                              : ATTENTION_KEEPS_PROBABILITIES,
                                 .classifier = fused_classifier ? CLASSIFIER_FUSED : CLASSIFIER_KEEPS_PROBABILITIES,
                                 .grad_clip = grad_clip,
                                 .ema = ema,
                                 .offload_optimizer = offload,
                                 .params = param_dtype,
                                 .grads = grad_dtype, .world = world, .steps = 2},
                       .prefetch = prefetch, .reshard = reshard, .shard_group = shard_group, .units = units,
                       .shard_min_numel = shard_min_numel};
    GPT2Layout layout;
    gpt2_layout_init(&layout, config);
    gpt2_layout_group_blocks(&layout, units.blocks > 0 ? units.blocks : 1, units.min_params);  // ZeRO-3's, FSDP's
    if (show_layout) {  // a line per rank and tensor: a picture's worth, not millions
        if (world > 4096) fatal("--layout draws up to 4096 ranks, not %d (use --tsv for the numbers)", world);
        if (shard_group != world) fatal("--layout draws full sharding: give it without --shard-group");
        print_layout(&layout, world, shard_min_numel);
        gpt2_layout_free(&layout);
        return 0;
    }
    if (time_mode) {
        if (!(tokens_per_s > 0)) fatal("--time needs --tokens-per-s R: one rank's measured tokens/s on this model");
        Machine machine = {.ranks_per_node = ranks_per_node, .compute_slots = compute_slots,
                           .across = parse_link(across, "--across"), .host = parse_link(host_link, "--host-link"),
                           .host_memory = cpu_adam * 1e9};
        machine.within = calibration ? calibrate(calibration, tsv, machine.within_op) : parse_link(within, "--within");
        machine.flops_per_s = tokens_per_s * gpt2_flops_per_step(&config, 1, T) / T;
        shape.setup.steps = 1;
        print_step_times(&shape, &machine, world, tsv);
        gpt2_layout_free(&layout);
        return 0;
    }
    if (timeline_name) {
        print_timeline(&shape, timeline_name, timeline_rank, &spec);
        gpt2_layout_free(&layout);
        return 0;
    }
    if (show_traffic) {
        if (world > MAX_TRAFFIC_RANKS) fatal("--traffic lists every rank: up to %d, not %d", MAX_TRAFFIC_RANKS, world);
        print_traffic(&shape);
        gpt2_layout_free(&layout);
        return 0;
    }
    if (!tsv) {
        double psi = (double)layout.num_params;
        printf("plan: L=%d C=%d NH=%d V=%d, P = %zu parameters, %d ranks, batch %d x %d (%d micro-batch(es) of %d "
               "rows per rank, %s)%s%s%s; ZeRO-3 and FSDP: %d unit(s) of blocks, prefetching %d\n",
               config.num_layers, config.channels, config.num_heads, config.vocab_size, layout.num_params, world,
               B, T, micro_batches, shape.setup.rows, accum_mode,
               recompute ? ", activations recomputed in backward" : "",
               fused_attention ? ", the fused attention (a GPU's)" : "",
               fused_classifier ? ", the fused classifier" : "", layout.num_units - 2,
               prefetch_window(&layout, prefetch));
        printf("ZeRO paper, mixed precision: 16P = %.3f MB per rank without sharding, 16P/N = %.3f MB with stage 3\n",
               16 * psi / 1e6, 16 * psi / world / 1e6);
        printf("peak MB per rank (%s parameters, %s gradients); reserved: what the allocator's cache "
               "holds at its peak, in use + kept for reuse\n%-6s %5s", dtype_name(param_dtype), dtype_name(grad_dtype),
               "", "rank");
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf(" %15s", mem_category_names[k]);
        printf(" %12s %12s\n", "device peak", "reserved");
    }
    // each strategy's own code, run dry for rank 0 (ZeRO-3: each rank that owns something)
    for (int k = 0; k < PLAN_NUM_STRATEGIES; k++) {
        if (k == PLAN_ZERO3) {
            print_zero3(&layout, &shape, tsv);
            continue;
        }
        DryResult result = run_rank(&shape, (PlanStrategy)k, 0, NULL);
        print_row(plan_names[k], "0", &result.mem, tsv);
        mem_timeline_free(&result.timeline);
    }
    if (!tsv)
        printf("(DDP, ZeRO-1, ZeRO-2 and FSDP: every rank alike; ZeRO-3: %s)%s\n",
               world <= 8 ? "each rank" : "rank 0 shown, --tsv for all",
               shard_group < world ? "; FSDP hybrid: sharded within groups of --shard-group ranks" : "");
    gpt2_layout_free(&layout);
    return 0;
}
