// plan: predicts the memory per rank of each strategy of the registry
// (run/registry.h), and with --time its step time, without training. It runs the trainers'
// own code (the strategy files, the model, the passes of a step) for one rank of
// N at a time on the dry device and a simulated network (plan/dry_run.h):
// every buffer goes through the same accountant and cache the trainers use, but
// no memory stands behind it and nothing is computed or moved, so its numbers,
// `reserved` included, are a real run's, and follow any change to a strategy.
//   build/plan ((--config dN | --dims L,NH,C) [--vocab V] | --model FILE.bin) --ranks N [--batch B --seq T]
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
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "util/errors.h"
#include "plan/dry_run.h"
#include "device/mem_timeline.h"
#include "device/memory.h"
#include "kit/partition.h"
#include "comm/sim_clock.h"
#include "kit/strategy.h"
#include "models/gpt2.h"
#include "models/gpt2_io.h"
#include "run/registry.h"

// Each rank is a dry run of a step or two, whose loops over the ranks make its
// time grow with N: about 10 s at this many.
#define MAX_SIMULATED_RANKS (1 << 20)
// --traffic runs every rank of every strategy.
#define MAX_TRAFFIC_RANKS 4096

// The strategies' own flags as the planner takes them: every registered
// strategy's (run/registry.h), each flag once, parsed into plugins of their own
// so that the command line's values are checked as the trainers check them.
#define MAX_STRATEGY_FLAGS 64
typedef struct {
    StrategyPlugin plugins[16];  // one per registered strategy, where its flags were first seen
    int num_plugins;
    CliOption flags[MAX_STRATEGY_FLAGS];
    char *help[MAX_STRATEGY_FLAGS];  // each flag's usage line, naming the strategies that take it
    int num_flags;
} StrategyFlags;

// What every simulated rank of one plan shares: the model, the step's shape,
// the rank count, the strategy flags given; each strategy adds its plugin, each
// rank its rank.
typedef struct {
    DrySetup setup;
    char *given[MAX_STRATEGY_FLAGS][2];  // the strategy flags the command line gave: flag, value (NULL: a switch)
    int num_given;
} PlanShape;

static const CliOption *find_flag(const CliOption *flags, int n, const char *flag) {
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].flag, flag) == 0) return &flags[i];
    return NULL;
}

// The strategies whose plugins take `flag`, "zero3 and fsdp", into names[size].
static const char *takers(const char *flag, char *names, size_t size) {
    size_t used = 0;
    names[0] = 0;
    for (int i = 0; i < num_registered_strategies; i++) {
        StrategyPlugin plugin = registry_plugin(&registered_strategies[i]);
        if (find_flag(plugin.flags, plugin.num_flags, flag))
            used += (size_t)snprintf(names + used, size - used, "%s%s", used ? " and " : "", registered_strategies[i].name);
        strategy_plugin_free(&plugin);
        CHECK(used < size, "takers: more than %zu characters", size);
    }
    return names;
}

// 1 if some strategy's preset sets `flag` (ddp's --zero-stage makes zero1 and
// zero2): the registry sets it, the command line may not.
static int in_a_preset(const char *flag) {
    size_t n = strlen(flag);
    for (int i = 0; i < num_registered_strategies; i++)
        for (const char *at = registered_strategies[i].preset; (at = strstr(at, flag)); at += n)
            if (at[n] == ' ' || at[n] == 0) return 1;
    return 0;
}

static void strategy_flags_init(StrategyFlags *f) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < num_registered_strategies; i++) {
        StrategyPlugin plugin = registered_strategies[i].plugin();
        int added = 0;
        for (int k = 0; k < plugin.num_flags; k++)
            if (!find_flag(f->flags, f->num_flags, plugin.flags[k].flag) && !in_a_preset(plugin.flags[k].flag)) {
                CHECK(f->num_flags < MAX_STRATEGY_FLAGS, "plan: raise MAX_STRATEGY_FLAGS");
                char names[512];
                const char *help = plugin.flags[k].help;
                size_t size = strlen(help) + sizeof names + 8;
                f->help[f->num_flags] = xmalloc(size);
                snprintf(f->help[f->num_flags], size, "%s: %s", takers(plugin.flags[k].flag, names, sizeof names),
                         help);
                f->flags[f->num_flags] = plugin.flags[k];
                f->flags[f->num_flags].help = f->help[f->num_flags];
                f->num_flags++, added = 1;
            }
        CHECK(f->num_plugins < 16 || !added, "plan: more than 16 plugins");
        if (added) f->plugins[f->num_plugins++] = plugin;
        else strategy_plugin_free(&plugin);
    }
}

static void strategy_flags_free(StrategyFlags *f) {
    for (int i = 0; i < f->num_plugins; i++) strategy_plugin_free(&f->plugins[i]);
    for (int i = 0; i < f->num_flags; i++) free(f->help[i]);
}

// The strategy flags among argv (already parsed: every flag is known and has
// its value), with their values, into shape->given.
static void collect_given(PlanShape *shape, const StrategyFlags *f, const CliOption *options, int num_options,
                          int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const CliOption *mine = find_flag(f->flags, f->num_flags, argv[i]);
        const CliOption *any = mine ? mine : find_flag(options, num_options, argv[i]);
        char *value = any && any->kind != CLI_SWITCH && i + 1 < argc ? argv[i + 1] : NULL;
        if (mine) {
            CHECK(shape->num_given < MAX_STRATEGY_FLAGS, "plan: raise MAX_STRATEGY_FLAGS");
            shape->given[shape->num_given][0] = argv[i], shape->given[shape->num_given++][1] = value;
        }
        if (value) i++;
    }
}

// `strategy`'s plugin: its preset, then the strategy flags given that it takes.
static StrategyPlugin plan_plugin(const PlanShape *shape, const RegisteredStrategy *strategy) {
    StrategyPlugin plugin = registry_plugin(strategy);
    char *argv[2 * MAX_STRATEGY_FLAGS + 1] = {"plan"};
    int argc = 1;
    for (int i = 0; i < shape->num_given; i++) {
        if (!find_flag(plugin.flags, plugin.num_flags, shape->given[i][0])) continue;
        argv[argc++] = shape->given[i][0];
        if (shape->given[i][1]) argv[argc++] = shape->given[i][1];
    }
    CliSpec spec = {.synopsis = "", .about = "", .options = plugin.flags, .num_options = plugin.num_flags};
    if (cli_parse(&spec, argc, argv, 1) != CLI_RUN) exit(1);
    return plugin;
}

// One rank of the strategy of `plugin` under `shape`, run dry (dry_run.h): its
// account and step.
static DryResult run_plugin(const PlanShape *shape, const StrategyPlugin *plugin, int rank, const Machine *machine) {
    DrySetup setup = shape->setup;
    setup.rank = rank;
    setup.machine = machine;
    setup.init = plugin->init;
    setup.options = plugin->options;
    if (plugin->units) setup.units = *plugin->units;
    DryResult result;
    dry_run(&setup, &result);
    return result;
}

static DryResult run_rank(const PlanShape *shape, const RegisteredStrategy *strategy, int rank,
                          const Machine *machine) {
    StrategyPlugin plugin = plan_plugin(shape, strategy);
    DryResult result = run_plugin(shape, &plugin, rank, machine);
    strategy_plugin_free(&plugin);
    return result;
}

// --params P: the model states alone, per rank, for P parameters on N ranks, by
// the ZeRO paper's accounting (its Figure 1): parameters, gradients and
// optimizer state, without activations, temporaries or padding. fp32: 4 + 4 + 8
// bytes per parameter (the parameters are AdamW's master copy; m and v); bf16,
// the paper's mixed precision: 2 + 2 + 12 (bf16 parameters and gradients; fp32
// master weights, m and v), or 2 + 4 + 12 with fp32 gradients.
// With --offload-optimizer (kit/resident.h) the device keeps the parameters
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
    printf("model states per rank: P = %llu parameters, N = %d ranks, %s parameters, %s gradients (%g + %g + %g "
           "bytes per parameter%s); GB = 1e9 bytes\n%-6s %12s %12s %12s %12s",
           (unsigned long long)P, world, dtype_name(param_dtype), dtype_name(grad_dtype), params, grads, optim,
           offload ? ", the optimizer state offloaded to the host" : "", "", "params", "grads", "optim", "total");
    if (offload) printf(" %12s %12s", "host optim", "host staging");
    printf("\n");
    // what each rung divides by N (its registry line): ZeRO-1 the optimizer state, ZeRO-2 the gradients too,
    // ZeRO-3 everything; the host's share follows the optimizer state's
    for (int i = 0; i < num_registered_strategies; i++) {
        const RegisteredStrategy *rung = &registered_strategies[i];
        double p = rung->shards & SHARDS_PARAMS ? params / N : params, g = rung->shards & SHARDS_GRADS ? grads / N : grads;
        double shared = rung->shards & SHARDS_OPTIM ? N : 1, o = device_optim / shared;
        printf("%-6s %12.3f %12.3f %12.3f %12.3f", rung->name, p * psi / 1e9, g * psi / 1e9, o * psi / 1e9,
               (p + g + o) * psi / 1e9);
        if (offload) printf(" %12.3f %12.3f", host_optim / shared * psi / 1e9, host_staging / shared * psi / 1e9);
        printf("\n");
    }
}

// The table's rows, held until all are known: its columns are the categories some row holds.
typedef struct {
    const char *strategy;
    char ranks[32];  // "r", or "first-last" for a run of ranks with the same numbers
    uint64_t peak[MEM_NUM_CATEGORIES], total_peak, reserved;  // bytes
} PlanRow;
typedef struct {
    PlanRow *rows;
    int count;
} PlanTable;

static void add_row(PlanTable *table, const char *strategy, const char *ranks, const MemAccount *acct) {
    table->rows = xrealloc(table->rows, (size_t)(table->count + 1) * sizeof *table->rows);
    PlanRow *row = &table->rows[table->count++];
    row->strategy = strategy;
    snprintf(row->ranks, sizeof row->ranks, "%s", ranks);
    memcpy(row->peak, acct->peak, sizeof row->peak);
    row->total_peak = acct->total_peak;
    row->reserved = mem_reserved_peak_bytes(acct);
}

// Puts the rows in the registry's order of their strategies, each strategy's rows as they came (stable).
static void in_registry_order(PlanTable *table) {
    PlanRow *sorted = xmalloc((size_t)(table->count ? table->count : 1) * sizeof *sorted);
    int n = 0;
    for (int k = 0; k < num_registered_strategies; k++)
        for (int i = 0; i < table->count; i++)
            if (strcmp(table->rows[i].strategy, registered_strategies[k].name) == 0) sorted[n++] = table->rows[i];
    CHECK(n == table->count, "plan: %d of the table's %d rows belong to no strategy", table->count - n, table->count);
    free(table->rows);
    table->rows = sorted;
}

// --tsv: every row with every category, in bytes.
static void print_tsv(const PlanTable *table) {
    for (int i = 0; i < table->count; i++) {
        const PlanRow *row = &table->rows[i];
        printf("%s\t%s", row->strategy, row->ranks);
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf("\t%" PRIu64, row->peak[k]);
        printf("\t%" PRIu64 "\t%" PRIu64 "\n", row->total_peak, row->reserved);
    }
}

// A column's header on two lines, split at its first '_' (or space): "params" over "gathered".
static void header_word(const char *name, int line, const char **word, int *length) {
    const char *cut = strpbrk(name, "_ ");
    *word = line == 0 ? name : cut ? cut + 1 : "";
    *length = line == 0 && cut ? (int)(cut - name) : (int)strlen(*word);
}

// Row i's value in column c, in MB: the categories shown, then the device peak and the reserved peak.
static double column_mb(const PlanRow *row, const int *columns, int count, int c) {
    uint64_t bytes = c < count ? row->peak[columns[c]] : c == count ? row->total_peak : row->reserved;
    return bytes / 1e6;
}

// The table in MB, without the categories no row holds (named below it); each column as wide as its widest
// header word or number.
static void print_table(const PlanTable *table) {
    const char *names[MEM_NUM_CATEGORIES + 2];
    int columns[MEM_NUM_CATEGORIES], count = 0, width[MEM_NUM_CATEGORIES + 2], ranks_width = 4;
    char idle[256] = "", text[64];
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++) {
        int held = 0;
        for (int i = 0; i < table->count; i++) held |= table->rows[i].peak[k] > 0;
        if (held) {
            names[count] = mem_category_names[k];
            columns[count++] = k;
        } else {
            size_t n = strlen(idle);
            snprintf(idle + n, sizeof idle - n, "%s%s", n ? ", " : "", mem_category_names[k]);
        }
    }
    names[count] = "device peak";
    names[count + 1] = "reserved";
    for (int c = 0; c < count + 2; c++) {
        width[c] = 10;
        for (int line = 0; line < 2; line++) {
            const char *word;
            int length;
            header_word(names[c], line, &word, &length);
            if (length > width[c]) width[c] = length;
        }
        for (int i = 0; i < table->count; i++) {
            int length = snprintf(text, sizeof text, "%.3f", column_mb(&table->rows[i], columns, count, c));
            if (length > width[c]) width[c] = length;
        }
    }
    for (int i = 0; i < table->count; i++) {
        int length = (int)strlen(table->rows[i].ranks);
        if (length > ranks_width) ranks_width = length;
    }
    for (int line = 0; line < 2; line++) {
        printf("%-6s %*s", "", ranks_width, line ? "rank" : "");
        for (int c = 0; c < count + 2; c++) {
            const char *word;
            int length;
            header_word(names[c], line, &word, &length);
            printf(" %*.*s", width[c], length, word);
        }
        printf("\n");
    }
    for (int i = 0; i < table->count; i++) {
        printf("%-6s %*s", table->rows[i].strategy, ranks_width, table->rows[i].ranks);
        for (int c = 0; c < count + 2; c++) printf(" %*.3f", width[c], column_mb(&table->rows[i], columns, count, c));
        printf("\n");
    }
    if (*idle) printf("(%s: 0 for every strategy)\n", idle);
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

// Whether two ranks' accounts print the same row.
static int same_row(const MemAccount *a, const MemAccount *b) {
    return memcmp(a->peak, b->peak, sizeof a->peak) == 0 && a->total_peak == b->total_peak &&
           mem_reserved_peak_bytes(a) == mem_reserved_peak_bytes(b);
}

// The rows of a strategy of whole tensors on owners (ZeRO-3): one per rank that owns a tensor, then the
// ranks that own none (when N exceeds the number of tensors). What such a rank holds depends on its place
// in the nodes of ZeRO++'s hpZ and of qgZ's two hops alone (rank r % H: the whole tensors it keeps for its
// node, the node's sums it gathers), so one rank of each place is run, and consecutive ranks with the same
// numbers share a row. The partition is computed once, so the work grows with the tensors and the places,
// not with N.
static void add_owner_rows(const GPT2Layout *layout, const PlanShape *shape, const RegisteredStrategy *strategy,
                           int tsv, PlanTable *table) {
    int world = shape->setup.world;
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    whole_tensor_owners(layout, world, owner);
    int owning = world < layout->num_tensors ? world : layout->num_tensors;  // ranks [0, owning) own a tensor
    for (int t = 0; t < layout->num_tensors; t++) CHECK(owner[t] < owning, "rank %d owns a tensor", owner[t]);
    char ranks[32];
    for (int r = 0; r < owning && (tsv || r == 0 || world <= 8); r++) {
        DryResult result = run_rank(shape, strategy, r, NULL);
        snprintf(ranks, sizeof ranks, "%d", r);
        add_row(table, strategy->name, ranks, &result.mem);
        mem_timeline_free(&result.timeline);
    }
    if (owning < world && (tsv || world <= 8)) {
        StrategyPlugin plugin = plan_plugin(shape, strategy);
        int period = 1, *nodes[] = {plugin.node_group, plugin.grads_node_group};
        for (int i = 0; i < 2; i++)
            if (nodes[i] && *nodes[i] > 1) period = period / gcd(period, *nodes[i]) * *nodes[i];
        strategy_plugin_free(&plugin);
        MemAccount *place = xcalloc((size_t)period, sizeof *place);  // each place's, once run
        int *run = xcalloc((size_t)period, sizeof(int));
        int first = owning;
        for (int r = owning; r < world; r++) {
            int p = r % period, q = (r + 1) % period;
            if (!run[p]) {
                DryResult result = run_rank(shape, strategy, r, NULL);
                place[p] = result.mem;
                mem_timeline_free(&result.timeline);
                run[p] = 1;
            }
            if (r + 1 < world && !run[q]) {
                DryResult result = run_rank(shape, strategy, r + 1, NULL);
                place[q] = result.mem;
                mem_timeline_free(&result.timeline);
                run[q] = 1;
            }
            if (r + 1 < world && same_row(&place[p], &place[q])) continue;  // the next rank joins this row
            if (first == r) snprintf(ranks, sizeof ranks, "%d", r);
            else snprintf(ranks, sizeof ranks, "%d-%d", first, r);
            add_row(table, strategy->name, ranks, &place[p]);
            first = r + 1;
        }
        free(place);
        free(run);
    }
    free(owner);
}

// --layout: which elements of the flat model (llm.c's order) each rank keeps
// between steps, for the sharding picture of the report, drawn by each
// strategy's placement (run/registry.h). Lines:
//   tensor NAME BEGIN END            a tensor's elements [BEGIN, END)
//   hold STRATEGY RANK BEGIN END [TENSOR]  the rank keeps elements [BEGIN, END) (flat ranges: of
//                                    the state they shard; their parameters are everywhere);
//                                    whole tensors and row slices name the tensor they are of
//   pad STRATEGY RANK AT COUNT       and COUNT zero padding elements after element AT
//                                    (row slices: of the tensor ending there; flat ranges: of the model)
static void print_replicated(const GPT2Layout *layout, int world, const char *name) {
    for (int r = 0; r < world; r++) printf("hold\t%s\t%d\t0\t%zu\n", name, r, layout->num_params);
}

static void print_flat_ranges(const GPT2Layout *layout, int world, const char *name) {
    for (int r = 0; r < world; r++) {  // the range whose optimizer state (and gradient) r owns
        size_t begin, end;
        flat_range(layout->num_params, world, r, &begin, &end);
        size_t P = layout->num_params, real_end = end < P ? end : P;
        if (begin < real_end) printf("hold\t%s\t%d\t%zu\t%zu\n", name, r, begin, real_end);
        if (end > P) printf("pad\t%s\t%d\t%zu\t%zu\n", name, r, P, end - (begin > P ? begin : P));
    }
}

static void print_whole_tensors(const GPT2Layout *layout, int world, const char *name) {
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    whole_tensor_owners(layout, world, owner);
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        printf("hold\t%s\t%d\t%zu\t%zu\t%s\n", name, owner[t], tensor->offset, tensor->offset + tensor->numel,
               tensor->name);
    }
    free(owner);
}

// Tensors of fewer than `whole_below` elements are kept whole on every rank.
static void print_row_slices(const GPT2Layout *layout, int world, const char *name, uint64_t whole_below) {
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        size_t k = (size_t)row_slice_rows(tensor, world), rows = (size_t)tensor->rows, cols = (size_t)tensor->cols;
        for (int r = 0; r < world && tensor->numel < whole_below; r++)  // kept whole on every rank
            printf("hold\t%s\t%d\t%zu\t%zu\t%s\n", name, r, tensor->offset, tensor->offset + tensor->numel,
                   tensor->name);
        for (int r = 0; r < world && tensor->numel >= whole_below; r++) {
            size_t first = r * k, last = first + k;  // rows [first, last), some past the end
            size_t real_end = last < rows ? last : rows;
            if (first < rows)
                printf("hold\t%s\t%d\t%zu\t%zu\t%s\n", name, r, tensor->offset + first * cols,
                       tensor->offset + real_end * cols, tensor->name);
            size_t padding_rows = last - (first > rows ? first : rows);
            if (last > rows)
                printf("pad\t%s\t%d\t%zu\t%zu\n", name, r, tensor->offset + tensor->numel, padding_rows * cols);
        }
    }
}

static void print_layout(const GPT2Layout *layout, const PlanShape *shape) {
    int world = shape->setup.world;
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        printf("tensor\t%s\t%zu\t%zu\n", tensor->name, tensor->offset, tensor->offset + tensor->numel);
    }
    for (int i = 0; i < num_registered_strategies; i++) {
        const RegisteredStrategy *strategy = &registered_strategies[i];
        StrategyPlugin plugin = plan_plugin(shape, strategy);
        switch (strategy->placement) {
        case PLACED_REPLICATED: print_replicated(layout, world, strategy->name); break;
        case PLACED_FLAT_RANGES: print_flat_ranges(layout, world, strategy->name); break;
        case PLACED_WHOLE_TENSORS: print_whole_tensors(layout, world, strategy->name); break;
        case PLACED_ROW_SLICES:
            print_row_slices(layout, world, strategy->name, plugin.whole_below ? *plugin.whole_below : 0);
            break;
        }
        strategy_plugin_free(&plugin);
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
        if (!strchr(line, '\n') && !feof(f))  // bench_comm's lines are short: this is not its table
            fatal("--calibrate %s:%d: a line longer than %zu characters, which bench_comm does not write", path,
                  line_number, sizeof line - 2);
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
        fatal("%s: no bench_comm timings at 2 or more ranks and two sizes to fit (make some in a file of their own: "
              "mpirun -np 2 build/bench_comm > timings.txt, then --calibrate timings.txt)", path);
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
// virtual clock of `machine`. A strategy's hybrid groups of M ranks
// (StrategyPlugin.shard_group) apply where M divides N, and ZeRO++'s nodes (StrategyPlugin.node_group,
// grads_node_group) where they divide the M ranks that shard into more than one.
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
        for (int k = 0; k < num_registered_strategies; k++) {
            const RegisteredStrategy *strategy = &registered_strategies[k];
            PlanShape shape = *plan;
            shape.setup.world = N;
            StrategyPlugin plugin = plan_plugin(&shape, strategy);
            int M = N;  // hybrid groups of M ranks where the strategy has them and M divides N
            if (plugin.shard_group && *plugin.shard_group > 0 && N % *plugin.shard_group == 0) M = *plugin.shard_group;
            if (plugin.shard_group) *plugin.shard_group = M;
            // ZeRO++'s nodes: where the M ranks that shard fit in one node, or a node does not divide them, none
            int *nodes[] = {plugin.node_group, plugin.grads_node_group};
            for (int k = 0; k < 2; k++)
                if (nodes[k] && *nodes[k] > 0 && (*nodes[k] >= M || M % *nodes[k] != 0)) *nodes[k] = 0;
            DryResult result = run_plugin(&shape, &plugin, 0, machine);
            strategy_plugin_free(&plugin);
            StepTime t = result.time;
            mem_timeline_free(&result.timeline);
            uint64_t sent = 0, across = 0;  // rank 0's bytes sent in the step, and of them among machines
            for (int op = 0; op < COMM_NUM_OPS; op++) {
                sent += result.last_step.ops[op].bytes_sent;
                across += result.last_step_machines.ops[op].bytes_sent;
            }
            double tokens_per_s = (double)N * d->rows * d->micro_batches * d->seq / t.step;
            if (tsv)  // columns added at the end: the ones before keep their places
                printf("%s\t%d\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%llu\t%llu\n", strategy->name, N, M, t.compute,
                       t.comm, t.exposed, t.step, tokens_per_s, t.offload, (unsigned long long)sent,
                       (unsigned long long)across);
            else
                printf("%-6s %6d %8d %12.3f %12.3f %12.3f %12.3f %12.3f %14.0f\n", strategy->name, N, M, 1e3 * t.compute,
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
static void print_timeline(const PlanShape *shape, const char *name, int rank) {
    char names[512];
    const RegisteredStrategy *strategy = registry_find(name);
    if (!strategy) fatal("--timeline: '%s' is not a strategy (give %s)", name, registry_names(names, sizeof names));
    // a strategy flag that this strategy does not take would change nothing
    StrategyPlugin plugin = plan_plugin(shape, strategy);
    for (int i = 0; i < shape->num_given; i++)
        if (!find_flag(plugin.flags, plugin.num_flags, shape->given[i][0]))
            fatal("%s: %s does not take it (%s do); give it without %s", shape->given[i][0], name,
                  takers(shape->given[i][0], names, sizeof names), shape->given[i][0]);
    if (rank >= shape->setup.world) fatal("--rank %d: the ranks are 0..%d", rank, shape->setup.world - 1);
    DryResult result = run_plugin(shape, &plugin, rank, NULL);
    strategy_plugin_free(&plugin);
    const MemTimeline *t = &result.timeline;
    printf("# %s, rank %d of %d: step %d's memory events (the last of %d), bytes\n# start:", name, rank,
           shape->setup.world, shape->setup.steps, shape->setup.steps);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %s %" PRIu64, mem_category_names[c], t->start[c]);
    printf("\n# event\tphase\tunit\tcategory\tbytes\ttotal\n");
    for (size_t i = 0; i < t->count; i++) {
        const MemEvent *e = &t->events[i];
        printf("%zu\t%s\t%d\t%s\t%lld\t%" PRIu64 "\n", i, mem_phase_names[e->phase], e->unit, mem_category_names[e->category],
               e->bytes, e->total);
    }
    uint64_t total, held[MEM_NUM_CATEGORIES];
    long at = mem_timeline_peak(t, &total, held);
    if (at < 0) printf("# peak: %" PRIu64 " bytes, held from the step's start (no event in it):", total);
    else printf("# peak: %" PRIu64 " bytes at event %ld (%s, unit %d):", total, at, mem_phase_names[t->events[at].phase],
                t->events[at].unit);
    for (int c = 0; c < MEM_NUM_CATEGORIES; c++) printf(" %s %" PRIu64, mem_category_names[c], held[c]);
    printf("\n");
    mem_timeline_free(&result.timeline);
}

// --traffic: the last step's collectives of every strategy on every rank, counted
// as the trainers count them (comm.h's ring model), one line per kind used.
static void print_traffic(const PlanShape *shape) {
    printf("# strategy\trank\tcollective\tcalls\telements\tbytes_sent\tbytes_recv\n");
    for (int k = 0; k < num_registered_strategies; k++)
        for (int r = 0; r < shape->setup.world; r++) {
            DryResult result = run_rank(shape, &registered_strategies[k], r, NULL);
            for (int op = 0; op < COMM_NUM_OPS; op++) {
                const CommCounter *c = &result.last_step.ops[op];
                if (c->calls)
                    printf("%s\t%d\t%s\t%llu\t%llu\t%llu\t%llu\n", registered_strategies[k].name, r, comm_op_names[op],
                           (unsigned long long)c->calls, (unsigned long long)c->elements,
                           (unsigned long long)c->bytes_sent, (unsigned long long)c->bytes_recv);
            }
            mem_timeline_free(&result.timeline);
        }
}


// --strategies: the registry (run/registry.h), one line each, with the flags of
// its trainer that are its own (its preset's apart).
static void print_strategies(void) {
    static const char *const placements[] = {"replicated", "flat_ranges", "whole_tensors", "row_slices"};
    printf("# name\ttitle\ttrainer\tpreset\treference\tshards\tplacement\tflags\n");
    for (int i = 0; i < num_registered_strategies; i++) {
        const RegisteredStrategy *s = &registered_strategies[i];
        printf("%s\t%s\ttrain_%s\t%s\t%s\t", s->name, s->title, s->folder, s->preset, s->reference);
        const char *states[] = {"optim", "grads", "params"};
        for (int k = 0, listed = 0; k < 3; k++)
            if (s->shards & (1 << k)) printf("%s%s", listed++ ? " " : "", states[k]);
        printf("\t%s\t", placements[s->placement]);
        StrategyPlugin plugin = registry_plugin(s);
        for (int k = 0, listed = 0; k < plugin.num_flags; k++)
            if (!in_a_preset(plugin.flags[k].flag)) printf("%s%s", listed++ ? " " : "", plugin.flags[k].flag);
        strategy_plugin_free(&plugin);
        printf("\n");
    }
}

// 1 if `flag` sets a strategy's tensors kept whole (StrategyPlugin.whole_below).
static int is_whole_below_flag(const StrategyFlags *f, const char *flag) {
    const CliOption *option = find_flag(f->flags, f->num_flags, flag);
    for (int i = 0; option && i < f->num_plugins; i++)
        if (f->plugins[i].whole_below && option->dest == f->plugins[i].whole_below) return 1;
    return 0;
}

// The flag of `plugin` that writes into `dest`.
static const char *flag_of(const StrategyPlugin *plugin, const void *dest) {
    for (int i = 0; i < plugin->num_flags; i++)
        if (plugin->flags[i].dest == dest) return plugin->flags[i].flag;
    return "?";
}

// What the trainers would refuse of each strategy's flags, refused here too.
static void check_strategies(const PlanShape *shape, int world) {
    for (int i = 0; i < num_registered_strategies; i++) {
        StrategyPlugin plugin = plan_plugin(shape, &registered_strategies[i]);
        const char *problem = plugin.check_options ? plugin.check_options(plugin.options) : NULL;
        if (!problem && plugin.units) problem = unit_policy_problem(plugin.units);
        if (problem) fatal("%s", problem);
        int M = plugin.shard_group ? *plugin.shard_group : 0;
        if (M > 0 && (M > world || world % M != 0))
            fatal("%s %d does not divide the %d ranks into equal groups", flag_of(&plugin, plugin.shard_group), M,
                  world);
        strategy_plugin_free(&plugin);
    }
}

// Groups the layout's blocks into units as the first strategy with units does
// (they take the same flags), for the header; returns its --prefetch's window.
static int group_units(const PlanShape *shape, GPT2Layout *layout) {
    for (int i = 0; i < num_registered_strategies; i++) {
        StrategyPlugin plugin = plan_plugin(shape, &registered_strategies[i]);
        const CliOption *prefetch = find_flag(plugin.flags, plugin.num_flags, "--prefetch");
        if (plugin.units) {
            gpt2_layout_group_blocks(layout, plugin.units->blocks > 0 ? plugin.units->blocks : 1,
                                     plugin.units->min_params);
            int window = prefetch ? prefetch_window(layout, *(const int *)prefetch->dest) : 0;
            strategy_plugin_free(&plugin);
            return window;
        }
        strategy_plugin_free(&plugin);
    }
    return 0;
}

// Under the table: which strategies' ranks are alike, and any hybrid groups.
static void print_rows_note(const PlanShape *shape) {
    int world = shape->setup.world;
    printf("(");
    for (int pass = 0; pass < 2; pass++) {  // the ranks alike, then those of whole tensors on owners
        int listed = 0;
        for (int i = 0; i < num_registered_strategies; i++) {
            const RegisteredStrategy *s = &registered_strategies[i];
            if ((s->placement == PLACED_WHOLE_TENSORS) != pass) continue;
            printf("%s%s", listed++ ? ", " : pass ? "; " : "", s->title);
        }
        if (listed) printf(pass ? ": %s" : ": every rank alike", world <= 8 ? "each rank" : "rank 0 shown, --tsv for all");
    }
    printf(")");
    for (int i = 0; i < num_registered_strategies; i++) {
        StrategyPlugin plugin = plan_plugin(shape, &registered_strategies[i]);
        int M = plugin.shard_group ? *plugin.shard_group : 0;
        if (M > 0 && M < world)
            printf("; %s hybrid: sharded within groups of %d ranks", registered_strategies[i].title, M);
        strategy_plugin_free(&plugin);
    }
    printf("\n");
}

// --dims L,NH,C: a GPT-2 of those sizes, llm.c's vocab padding, room for 1024 tokens or T.
static GPT2Config dims_config(const char *dims, int vocab, int T) {
    GPT2Config c;
    int *sizes[3] = {&c.num_layers, &c.num_heads, &c.channels};
    const char *at = dims;
    for (int i = 0; i < 3; i++) {  // strtol, not sscanf's %d: a number past INT_MAX is refused, not wrapped
        char *end;
        errno = 0;
        long v = at[0] >= '0' && at[0] <= '9' ? strtol(at, &end, 10) : -1;
        if (v <= 0 || errno || v > INT_MAX || *end != (i < 2 ? ',' : '\0'))
            fatal("--dims '%s': give L,NH,C, three positive whole numbers (blocks, heads, channels) below 2^31, "
                  "e.g. 12,12,768", dims);
        *sizes[i] = (int)v;
        at = end + 1;
    }
    if (c.channels % c.num_heads != 0)
        fatal("--dims '%s': %d heads do not divide %d channels", dims, c.num_heads, c.channels);
    c.max_seq_len = T > 1024 ? T : 1024;
    c.vocab_size = vocab > 0 ? vocab : 50257;
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
    gpt2_config_validate(&c, "--dims");
    return c;
}

#if SIZE_MAX <= UINT32_MAX
// The browser's planner (make web) counts elements and a buffer's bytes in a
// 32-bit size_t: a model whose parameters, or a micro-batch whose activations,
// would pass 2 GiB in fp32 (about 5.4e8 of them: the dry cache's largest block,
// device/cache.c) is refused before a count could wrap (byte totals are 64-bit,
// memory.h; a buffer that grows past it otherwise stops in the cache, naming the
// limit). The bound on activations is generous: every
// block's buffers, its attention's (T, T) probabilities twice, and the logits'
// three (B, T, Vp).
static void refuse_beyond_32_bits(const GPT2Config *c, int rows, int T) {
    double C = c->channels, L = c->num_layers, Vp = c->padded_vocab_size;
    double params = Vp * C + (double)c->max_seq_len * C + L * (12 * C * C + 13 * C) + 2 * C;
    double activations = (double)rows * T * (L * (40 * C + 2.0 * c->num_heads * T) + 3 * Vp + 8 * C);
    if (4 * params > (double)(SIZE_MAX / 2) || 4 * activations > (double)(SIZE_MAX / 2))
        fatal("%.3g parameters and %.3g activation floats a micro-batch: the browser's planner counts a buffer in 32 "
              "bits (up to 2 GiB); build/plan, or --params P for the model states alone, has no such limit",
              params, activations);
}
#endif

int main(int argc, char **argv) {
    const char *config_name = NULL, *model_path = NULL, *dims = NULL;
    int vocab = 0, world = 0, B = 0, T = 64, tsv = 0, recompute = 0, show_layout = 0, timeline_rank = 0;
    int fused_attention = 0, fused_classifier = 0, offload = 0;
    const char *timeline_name = NULL;
    int show_traffic = 0;
    int micro_batches = 1;
    int time_mode = 0, ranks_per_node = 8, compute_slots = 0;
    float tokens_per_s = 0, grad_clip = 0, ema = 0;
    const char *within = "5e-6,300", *across = "1e-5,25", *calibration = NULL, *host_link = "1e-5,25";
    float cpu_adam = 55;
    const char *accum_mode = "sync-each", *precision = "fp32", *reduce_dtype = NULL;
    uint64_t params_only = 0;
    int show_strategies = 0;
    const CliOption own[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (d12 is GPT-2 124M)"},
        {"--dims", "L,NH,C", CLI_STRING, &dims, 0, 0,
         "instead of a preset: GPT-2's blocks, L of them, NH heads, C channels (NH divides C; up to 1024 tokens, or "
         "--seq if more), for models no file holds"},
        {"--vocab", "V", CLI_INT, &vocab, 1, 1 << 24, "vocab of a --config or --dims model (default 50257)"},
        {"--model", "FILE.bin", CLI_STRING, &model_path, 0, 0, "the shape of an llm.c checkpoint instead"},
        {"--ranks", "N", CLI_INT, &world, 1, 1 << 24, "number of ranks"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 30, "global sequences per step, divisible by N (default 4 per rank: 4N)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 24, "sequence length (default 64)"},
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
         "instead: one step's memory events for STRATEGY (one of --strategies): phase, unit, category, "
         "bytes, total after; then the peak's moment"},
        {"--rank", "R", CLI_INT, &timeline_rank, 0, 1 << 24, "--timeline: the rank whose step it shows (default 0)"},
        {"--traffic", NULL, CLI_SWITCH, &show_traffic, 0, 0,
         "instead: each strategy's collectives in one step, every rank (TSV: strategy, rank, collective, calls, "
         "elements, bytes sent, bytes received), as the trainers' comm_last_step counts them"},
        {"--layout", NULL, CLI_SWITCH, &show_layout, 0, 0,
         "instead: which elements of the flat model each rank keeps, per strategy (TSV)"},
        {"--strategies", NULL, CLI_SWITCH, &show_strategies, 0, 0,
         "instead: the strategies it plans, one line each (TSV: name, title, trainer, the trainer's flags that make "
         "it, train_single's flags that make its reference, what it divides by N, where that lives, its own flags)"},
    };
    // then the strategies' own flags (each strategy takes those of its trainer)
    enum { NUM_OWN = sizeof own / sizeof own[0] };
    StrategyFlags strategy_flags;
    strategy_flags_init(&strategy_flags);
    CliOption options[NUM_OWN + MAX_STRATEGY_FLAGS];
    memcpy(options, own, sizeof own);
    memcpy(options + NUM_OWN, strategy_flags.flags, (size_t)strategy_flags.num_flags * sizeof *options);
    CliSpec spec = {.synopsis = "((--config dN | --dims L,NH,C) [--vocab V] | --model FILE.bin | --params P) --ranks N "
                                "[--batch B] "
                                "[--seq T] [--precision fp32|bf16] [--reduce-dtype fp32|bf16] "
                                "[--recompute] [--fused-attention] [--fused-classifier] [--grad-accum K] "
                                "[--ema DECAY] [--grad-clip C] [--offload-optimizer] [--accum-mode sync-each|no-sync] "
                                "[the strategies' flags] "
                                "[--tsv | --layout | --traffic | --timeline STRATEGY [--rank R] | --strategies]",
                    .about = "predicts each strategy's memory per rank, and what the allocator reserves, "
                             "without training; the strategies' own flags (listed last, below) go to each "
                             "strategy whose trainer takes them",
                    .options = options, .num_options = NUM_OWN + strategy_flags.num_flags};
    int given[NUM_OWN + MAX_STRATEGY_FLAGS];
    spec.given = given;
    cli_parse_or_exit(&spec, argc, argv);
    PlanShape shape = {0};
    collect_given(&shape, &strategy_flags, own, NUM_OWN, argc, argv);
    if (show_strategies) {
        if (argc > 2) fatal("--strategies lists the strategies, nothing else: give it alone");
        print_strategies();
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    static const char *const time_flags[] = {"--tokens-per-s", "--ranks-per-node", "--cores-per-node", "--within",
                                             "--across", "--calibrate", "--host-link", "--cpu-adam", NULL};
    static const char *const step_flags[] = {"--vocab", "--batch", "--seq", "--recompute",
                                             "--fused-attention", "--fused-classifier", "--grad-clip", "--ema",
                                             "--grad-accum", "--accum-mode", "--time", "--layout",
                                             "--tsv", NULL};
    static const char *const layout_flags[] = {"--batch", "--seq", "--recompute",
                                               "--fused-attention", "--fused-classifier", "--grad-clip", "--ema",
                                               "--grad-accum", "--accum-mode", "--precision",
                                               "--reduce-dtype", "--offload-optimizer", "--time", "--tsv", NULL};
    if (!time_mode) refuse_flags(&spec, time_flags, "it sets the step-time model of --time");
    if (params_only) {
        refuse_flags(&spec, step_flags, "--params P plans the model states alone");
        if (shape.num_given) fatal("%s: --params P plans the model states alone; give it without %s", shape.given[0][0],
                                   shape.given[0][0]);
    }
    if (show_layout) {
        refuse_flags(&spec, layout_flags, "--layout draws where each element lives, nothing else");
        for (int i = 0; i < shape.num_given; i++)  // only a strategy's whole small tensors change the picture
            if (!is_whole_below_flag(&strategy_flags, shape.given[i][0]))
                fatal("%s: --layout draws where each element lives, nothing else; give it without %s",
                      shape.given[i][0], shape.given[i][0]);
    }
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
    check_strategies(&shape, world);
    DType param_dtype, grad_dtype;
    if (dtype_parse(precision, &param_dtype) != 0) fatal("--precision: give fp32 or bf16");
    grad_dtype = param_dtype;
    if (reduce_dtype && dtype_parse(reduce_dtype, &grad_dtype) != 0) fatal("--reduce-dtype: give fp32 or bf16");
    if (params_only) {
        if (config_name || model_path || dims)
            fatal("--params P plans the model states alone: give it without --config, --dims or --model");
        print_model_states(params_only, world, param_dtype, grad_dtype, offload);
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    if ((config_name != NULL) + (model_path != NULL) + (dims != NULL) != 1)
        fatal("give exactly one of --config dN, --dims L,NH,C, --model FILE.bin and --params P (%s --help)", argv[0]);
    if (model_path && vocab) fatal("--vocab goes with --config or --dims; a --model file has its own vocab");
    GPT2Config config;
    if (model_path) gpt2_checkpoint_read_config(model_path, &config);
    else if (dims) config = dims_config(dims, vocab, T);
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
#if SIZE_MAX <= UINT32_MAX
    refuse_beyond_32_bits(&config, B / world / micro_batches, T);
#endif
    shape.setup = (DrySetup){.accum_mode = strcmp(accum_mode, "sync-each") == 0 ? ACCUM_SYNC_EACH : ACCUM_NO_SYNC,
                                 .config = config, .rows = B / world / micro_batches, .seq = T,
                                 .micro_batches = micro_batches, .recompute = recompute,
                                 .attention = fused_attention ? ATTENTION_KEEPS_LOGSUMEXP
                                                              : ATTENTION_KEEPS_PROBABILITIES,
                                 .classifier = fused_classifier ? CLASSIFIER_FUSED : CLASSIFIER_KEEPS_PROBABILITIES,
                                 .grad_clip = grad_clip,
                                 .ema = ema,
                                 .offload_optimizer = offload,
                                 .params = param_dtype,
                                 .grads = grad_dtype, .world = world, .steps = 2};
    GPT2Layout layout;
    gpt2_layout_init(&layout, config);
    int prefetch = group_units(&shape, &layout);
    if (show_layout) {  // a line per rank and tensor: a picture's worth, not millions
        if (world > 4096) fatal("--layout draws up to 4096 ranks, not %d (use --tsv for the numbers)", world);
        print_layout(&layout, &shape);
        gpt2_layout_free(&layout);
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    if (time_mode) {
        if (!(tokens_per_s > 0))
            fatal("--time needs --tokens-per-s R above 0: one rank's measured tokens/s on this model (%s)",
                  cli_given(&spec, "--tokens-per-s") ? "0 given" : "none given");
        Machine machine = {.ranks_per_node = ranks_per_node, .compute_slots = compute_slots,
                           .across = parse_link(across, "--across"), .host = parse_link(host_link, "--host-link"),
                           .host_memory = cpu_adam * 1e9};
        machine.within = calibration ? calibrate(calibration, tsv, machine.within_op) : parse_link(within, "--within");
        machine.flops_per_s = tokens_per_s * gpt2_flops_per_step(&config, 1, T) / T;
        shape.setup.steps = 1;
        print_step_times(&shape, &machine, world, tsv);
        gpt2_layout_free(&layout);
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    if (timeline_name) {
        print_timeline(&shape, timeline_name, timeline_rank);
        gpt2_layout_free(&layout);
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    if (show_traffic) {
        if (world > MAX_TRAFFIC_RANKS) fatal("--traffic lists every rank: up to %d, not %d", MAX_TRAFFIC_RANKS, world);
        print_traffic(&shape);
        gpt2_layout_free(&layout);
        strategy_flags_free(&strategy_flags);
        return 0;
    }
    // each strategy's own code, run dry for rank 0 (whole tensors on owners: each rank that owns something);
    // the table is printed once every strategy has run: a strategy that refuses a flag (a node of hpZ's that
    // does not divide its ranks) stops the plan with its message alone, nothing printed before it
    // The strategies that slice every tensor run first: their padded buffers, the largest, are what a 32-bit
    // build (the browser's) may refuse, and a refusal then comes before the others' work, not after it. Their
    // rows are put back in the registry's order below.
    PlanTable rows = {0};
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < num_registered_strategies; k++) {
            const RegisteredStrategy *strategy = &registered_strategies[k];
            if ((strategy->placement == PLACED_ROW_SLICES) != (pass == 0)) continue;
            if (strategy->placement == PLACED_WHOLE_TENSORS) {
                add_owner_rows(&layout, &shape, strategy, tsv, &rows);
                continue;
            }
            DryResult result = run_rank(&shape, strategy, 0, NULL);
            add_row(&rows, strategy->name, "0", &result.mem);
            mem_timeline_free(&result.timeline);
        }
    in_registry_order(&rows);
    if (tsv) {
        print_tsv(&rows);
    } else {
        double psi = (double)layout.num_params;
        printf("plan: L=%d C=%d NH=%d V=%d, P = %zu parameters, %d ranks, batch %d x %d (%d micro-batch(es) of %d "
               "rows per rank, %s)%s%s%s\nthe strategies that gather by unit: %d unit(s) of blocks, prefetching %d\n",
               config.num_layers, config.channels, config.num_heads, config.vocab_size, layout.num_params, world,
               B, T, micro_batches, shape.setup.rows, accum_mode,
               recompute ? ", activations recomputed in backward" : "",
               fused_attention ? ", the fused attention (a GPU's)" : "",
               fused_classifier ? ", the fused classifier" : "", layout.num_units - 2,
               prefetch_window(&layout, prefetch));
        printf("ZeRO paper, mixed precision: 16P = %.3f MB per rank without sharding, 16P/N = %.3f MB with stage 3\n",
               16 * psi / 1e6, 16 * psi / world / 1e6);
        printf("peak MB per rank (%s parameters, %s gradients)\nreserved: what the allocator's cache "
               "holds at its peak, in use + kept for reuse\n", dtype_name(param_dtype), dtype_name(grad_dtype));
        print_table(&rows);
        print_rows_note(&shape);
    }
    free(rows.rows);
    gpt2_layout_free(&layout);
    strategy_flags_free(&strategy_flags);
    return 0;
}
