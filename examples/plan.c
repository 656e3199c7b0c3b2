// plan: predicts each strategy's memory per rank (ddp, zero1, zero2, zero3,
// fsdp) without training. It replays a run's allocations buffer by buffer (the
// model's, the strategy's resident state, one training step's temporaries, in
// the trainers' order) on a dry account of the same accountant and cache the
// trainers use, with the same partitioner, so its numbers, `reserved` included,
// can be held against a real run's summary.
//   build/plan (--config dN [--vocab V] | --model FILE.bin) --ranks N [--batch B --seq T]
//              [--reshard-after-forward 0|1] [--recompute] [--tsv | --layout]
// --batch defaults to 4 sequences per rank (4N), so any N works as given.
// --tsv prints one line per strategy and rank: strategy, rank, then bytes per
// category (docs/memory.md order), the peak, and the cache's reserved peak.
// Ranks with the same numbers share one line whose rank field is "first-last"
// (ZeRO-3's ranks that own no tensor, once N exceeds the number of tensors).
// --layout prints, instead, which elements of the flat model each rank keeps
// (see print_layout), for the report's sharding picture.
#include <stdio.h>
#include <stdlib.h>

#include "../common/util/cli.h"
#include "../common/util/errors.h"
#include "../common/memory.h"
#include "../common/partition.h"
#include "../models/gpt2.h"
#include "../models/gpt2_io.h"

// The trainers' buffers one by one, as device_alloc and device_free make and
// return them in the CPU build, on a dry account (acct->cache.dry: no memory
// behind them): the categories come out as a run's, and so does the cache's
// `reserved`, which depends on the order and the size of every buffer.
static void take(MemAccount *acct, MemCategory category, size_t floats) { mem_alloc_floats(acct, category, floats); }
static void give(MemAccount *acct, MemCategory category, size_t floats) { mem_free_floats(acct, category, NULL, floats); }

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

// resident_init and resident_free (common/resident.c): `floats` each of
// parameters, gradients, m and v.
static void take_resident(MemAccount *acct, size_t floats) {
    take(acct, MEM_PARAMS, floats);
    take(acct, MEM_GRADS, floats);
    take(acct, MEM_OPTIM, floats);
    take(acct, MEM_OPTIM, floats);
}

static void give_resident(MemAccount *acct, size_t floats) {
    give(acct, MEM_PARAMS, floats);
    give(acct, MEM_GRADS, floats);
    give(acct, MEM_OPTIM, floats);
    give(acct, MEM_OPTIM, floats);
}

static void plan_ddp(const GPT2Layout *layout, MemAccount *acct, ModelBuffers model) {
    take_model(acct, model);
    take_resident(acct, layout->num_params);  // nothing else: buckets are reduced in place
    give_resident(acct, layout->num_params);
    give_model(acct, model);
}

// ZeRO-1/2, as ddp/zero12.c runs a step: the whole parameter replica (padded to
// N ranges of S), AdamW moments of this rank's range, and gradients whole
// (ZeRO-1) or of the range alone (ZeRO-2). ZeRO-2's full-size gradients live
// from the first backward that writes them until their bucket's reduce is
// waited for, after the next unit's backward (the head's wte until unit 0's);
// the all-gather after AdamW sends from a copy of the range.
static void plan_zero12(const GPT2Layout *layout, int world, int stage, MemAccount *acct, ModelBuffers model) {
    size_t S = zero12_range_numel(layout->num_params, world), grads = stage == 1 ? layout->num_params : S;
    take_model(acct, model);
    take(acct, MEM_PARAMS, S * (size_t)world);
    take(acct, MEM_GRADS, grads);
    take(acct, MEM_OPTIM, S);
    take(acct, MEM_OPTIM, S);
    if (stage == 2) {
        int *held = xcalloc((size_t)layout->num_tensors, sizeof(int));
        for (int u = layout->num_units - 1; u >= -1; u--) {  // u = -1: finish_grads
            for (int i = 0; u >= 0 && i < layout->unit_num_tensors[u]; i++) {
                int t = layout->unit_tensors[u][i];
                if (!held[t]) take(acct, MEM_GRADS_GATHERED, layout->tensors[t].numel);
                held[t] = 1;
            }
            for (int t = 0; t < layout->num_tensors; t++)  // after unit u: unit u+1's bucket is freed
                if (layout->tensors[t].home_unit == u + 1 && held[t]) {
                    give(acct, MEM_GRADS_GATHERED, layout->tensors[t].numel);
                    held[t] = 0;
                }
        }
        free(held);
    }
    take(acct, MEM_COMM_BUFFERS, S);
    give(acct, MEM_COMM_BUFFERS, S);
    give(acct, MEM_PARAMS, S * (size_t)world);
    give(acct, MEM_GRADS, grads);
    give(acct, MEM_OPTIM, S);
    give(acct, MEM_OPTIM, S);
    give_model(acct, model);
}

// ZeRO-3, as zero3/zero3.c runs a step: per unit, each tensor owned elsewhere is
// broadcast into a temporary; in backward, every tensor of the unit also gets a
// temporary gradient, freed as it is reduced, before the parameters are.
static void plan_zero3(const GPT2Layout *layout, const int *owner, int rank, MemAccount *acct, ModelBuffers model) {
    size_t owned = zero3_owned_bytes(layout, owner, rank) / sizeof(float);
    take_model(acct, model);
    take_resident(acct, owned);
    for (int pass = 0; pass < 2; pass++) {  // forward, then backward (same sets, other order)
        for (int k = 0; k < layout->num_units; k++) {
            int u = pass == 0 ? k : layout->num_units - 1 - k;
            const int *tensors = layout->unit_tensors[u];
            int count = layout->unit_num_tensors[u];
            for (int i = 0; i < count; i++)
                if (owner[tensors[i]] != rank) take(acct, MEM_PARAMS_GATHERED, layout->tensors[tensors[i]].numel);
            for (int i = 0; pass == 1 && i < count; i++) take(acct, MEM_GRADS_GATHERED, layout->tensors[tensors[i]].numel);
            for (int i = 0; pass == 1 && i < count; i++) give(acct, MEM_GRADS_GATHERED, layout->tensors[tensors[i]].numel);
            for (int i = 0; i < count; i++)
                if (owner[tensors[i]] != rank) give(acct, MEM_PARAMS_GATHERED, layout->tensors[tensors[i]].numel);
        }
    }
    give_resident(acct, owned);
    give_model(acct, model);
}

// FSDP's all-gather of the unit's tensors not held yet (fsdp.c gather_unit): a
// send buffer of this rank's slices and a receive buffer of everyone's, then
// the full (padded) tensors, then the two buffers go.
static void plan_fsdp_gather(const GPT2Layout *layout, int world, int unit, int *held, MemAccount *acct) {
    size_t pack = 0;
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (!held[t]) pack += fsdp_slice_numel(&layout->tensors[t], world);
    }
    if (pack == 0) return;
    take(acct, MEM_COMM_BUFFERS, pack);
    take(acct, MEM_COMM_BUFFERS, pack * (size_t)world);
    for (int i = 0; i < layout->unit_num_tensors[unit]; i++) {
        int t = layout->unit_tensors[unit][i];
        if (held[t]) continue;
        take(acct, MEM_PARAMS_GATHERED, fsdp_padded_numel(&layout->tensors[t], world));
        held[t] = 1;
    }
    give(acct, MEM_COMM_BUFFERS, pack);
    give(acct, MEM_COMM_BUFFERS, pack * (size_t)world);
}

// After backward (fsdp.c before_backward, reduce_unit): full gradients for the
// unit; the reduce-scatter's send and receive buffers while they are alive.
static void plan_fsdp_grads(const GPT2Layout *layout, int world, int unit, MemAccount *acct) {
    const int *tensors = layout->unit_tensors[unit];
    int count = layout->unit_num_tensors[unit];
    size_t pack = 0;
    for (int i = 0; i < count; i++) {
        take(acct, MEM_GRADS_GATHERED, fsdp_padded_numel(&layout->tensors[tensors[i]], world));
        pack += fsdp_slice_numel(&layout->tensors[tensors[i]], world);
    }
    take(acct, MEM_COMM_BUFFERS, pack * (size_t)world);
    take(acct, MEM_COMM_BUFFERS, pack);
    for (int i = 0; i < count; i++) give(acct, MEM_GRADS_GATHERED, fsdp_padded_numel(&layout->tensors[tensors[i]], world));
    give(acct, MEM_COMM_BUFFERS, pack * (size_t)world);
    give(acct, MEM_COMM_BUFFERS, pack);
}

// FSDP, as fsdp/fsdp.c runs a step: gather before each unit, forward and
// backward; free the full tensors after backward, and after forward too when
// resharding (otherwise they stay for the unit's backward: the tied wte then
// stays from unit 0's forward to the head's backward).
static void plan_fsdp(const GPT2Layout *layout, int world, int reshard, MemAccount *acct, ModelBuffers model) {
    size_t slices = fsdp_padded_params(layout, world) / (size_t)world;
    int *held = xcalloc((size_t)layout->num_tensors, sizeof(int));
    take_model(acct, model);
    take_resident(acct, slices);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < layout->num_units; k++) {
            int u = pass == 0 ? k : layout->num_units - 1 - k;
            plan_fsdp_gather(layout, world, u, held, acct);
            if (pass == 1) plan_fsdp_grads(layout, world, u, acct);
            for (int i = 0; (pass == 1 || reshard) && i < layout->unit_num_tensors[u]; i++) {
                int t = layout->unit_tensors[u][i];
                if (!held[t]) continue;
                give(acct, MEM_PARAMS_GATHERED, fsdp_padded_numel(&layout->tensors[t], world));
                held[t] = 0;
            }
        }
    }
    give_resident(acct, slices);
    give_model(acct, model);
    free(held);
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
static void print_zero3(const GPT2Layout *layout, int world, ModelBuffers model, int tsv) {
    int *owner = xcalloc((size_t)layout->num_tensors, sizeof(int));
    zero3_partition(layout, world, owner);
    int owning = world < layout->num_tensors ? world : layout->num_tensors;  // ranks [0, owning) own a tensor
    for (int t = 0; t < layout->num_tensors; t++) CHECK(owner[t] < owning, "rank %d owns a tensor", owner[t]);
    char ranks[32];
    for (int r = 0; r < owning && (tsv || r == 0 || world <= 8); r++) {
        MemAccount acct = {.cache.dry = 1};
        plan_zero3(layout, owner, r, &acct, model);
        snprintf(ranks, sizeof ranks, "%d", r);
        print_row("zero3", ranks, &acct, tsv);
    }
    if (owning < world && (tsv || world <= 8)) {
        MemAccount acct = {.cache.dry = 1};
        plan_zero3(layout, owner, owning, &acct, model);
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

int main(int argc, char **argv) {
    const char *config_name = NULL, *model_path = NULL;
    int vocab = 0, world = 0, B = 0, T = 64, reshard = 1, tsv = 0, recompute = 0, show_layout = 0;
    const CliOption options[] = {
        {"--config", "d2|d4|d6|d12", CLI_STRING, &config_name, 0, 0, "a preset model (d12 is GPT-2 124M)"},
        {"--vocab", "V", CLI_INT, &vocab, 1, 1 << 24, "vocab of a --config model (default 50257)"},
        {"--model", "FILE.bin", CLI_STRING, &model_path, 0, 0, "the shape of an llm.c checkpoint instead"},
        {"--ranks", "N", CLI_INT, &world, 1, 1 << 24, "number of ranks"},
        {"--batch", "B", CLI_INT, &B, 1, 1 << 30, "global sequences per step, divisible by N (default 4 per rank: 4N)"},
        {"--seq", "T", CLI_INT, &T, 1, 1 << 24, "sequence length (default 64)"},
        {"--reshard-after-forward", "0|1", CLI_INT, &reshard, 0, 1, "FSDP's setting (default 1)"},
        {"--recompute", NULL, CLI_SWITCH, &recompute, 0, 0, "the trainers' --recompute: activations of one block, not L"},
        {"--tsv", NULL, CLI_SWITCH, &tsv, 0, 0,
         "one line per strategy and rank (ranks alike share a line \"first-last\"): bytes per category, peak, "
         "reserved peak"},
        {"--layout", NULL, CLI_SWITCH, &show_layout, 0, 0,
         "instead: which elements of the flat model each rank keeps, per strategy (TSV)"},
    };
    CliSpec spec = {.synopsis = "(--config dN [--vocab V] | --model FILE.bin) --ranks N [--batch B] [--seq T] "
                                "[--reshard-after-forward 0|1] [--recompute] [--tsv | --layout]",
                    .about = "predicts each strategy's memory per rank, and what the allocator reserves, "
                             "without training",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    if (!config_name == !model_path) fatal("give exactly one of --config dN and --model FILE.bin (%s --help)", argv[0]);
    if (!world) fatal("--ranks N is required (%s --help)", argv[0]);
    if (model_path && vocab) fatal("--vocab goes with --config; a --model file has its own vocab");
    GPT2Config config;
    if (model_path) gpt2_checkpoint_read_config(model_path, &config);
    else if (gpt2_config_preset(config_name, vocab, &config) != 0) fatal("--config: unknown preset '%s'", config_name);
    if (!B) B = 4 * world;
    if (B % world != 0) fatal("--batch %d is not divisible by --ranks %d", B, world);
    if (T > config.max_seq_len) fatal("--seq %d exceeds the model's maximum %d", T, config.max_seq_len);
    GPT2Layout layout;
    gpt2_layout_init(&layout, config);
    if (show_layout) {  // a line per rank and tensor: a picture's worth, not millions
        if (world > 4096) fatal("--layout draws up to 4096 ranks, not %d (use --tsv for the numbers)", world);
        print_layout(&layout, world);
        gpt2_layout_free(&layout);
        return 0;
    }
    ModelBuffers model = {gpt2_num_activations(&config, B / world, T, recompute),
                          GPT2_BATCH_ARRAYS * (size_t)(B / world) * T};
    if (!tsv) {
        double psi = (double)layout.num_params;
        printf("plan: L=%d C=%d NH=%d V=%d, P = %zu parameters, %d ranks, batch %d x %d (%d rows per rank)%s\n",
               config.num_layers, config.channels, config.num_heads, config.vocab_size, layout.num_params, world,
               B, T, B / world, recompute ? ", activations recomputed in backward" : "");
        printf("ZeRO paper, mixed precision: 16P = %.3f MB per rank without sharding, 16P/N = %.3f MB with stage 3\n",
               16 * psi / 1e6, 16 * psi / world / 1e6);
        printf("peak MB per rank (fp32 here: 16P resident for DDP); reserved: what the allocator's cache "
               "holds at its peak, in use + kept for reuse\n%-6s %5s", "", "rank");
        for (int k = 0; k < MEM_NUM_CATEGORIES; k++) printf(" %15s", mem_category_names[k]);
        printf(" %12s %12s\n", "total peak", "reserved");
    }
    MemAccount acct = {.cache.dry = 1};
    plan_ddp(&layout, &acct, model);
    print_row("ddp", "0", &acct, tsv);
    for (int stage = 1; stage <= 2; stage++) {
        acct = (MemAccount){.cache.dry = 1};
        plan_zero12(&layout, world, stage, &acct, model);
        print_row(stage == 1 ? "zero1" : "zero2", "0", &acct, tsv);
    }
    print_zero3(&layout, world, model, tsv);
    acct = (MemAccount){.cache.dry = 1};
    plan_fsdp(&layout, world, reshard, &acct, model);
    print_row("fsdp", "0", &acct, tsv);
    if (!tsv)
        printf("(DDP, ZeRO-1, ZeRO-2 and FSDP: every rank alike; ZeRO-3: %s)\n",
               world <= 8 ? "each rank" : "rank 0 shown, --tsv for all");
    gpt2_layout_free(&layout);
    return 0;
}
