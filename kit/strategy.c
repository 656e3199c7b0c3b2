// strategy.c: what the strategies share beyond their interface.
#include "kit/strategy.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "kit/partition.h"

void strategy_note(const StrategyContext *ctx, const char *fmt, ...) {
    if (ctx->quiet || ctx->comm->rank != 0) return;
    va_list args;
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
}

const char *unit_policy_problem(const UnitPolicy *policy) {
    if (policy->blocks > 0 && policy->min_params > 0)
        return "--unit-blocks and --wrap-min-params both set the units: give one of them";
    return NULL;
}

void strategy_group_units(const StrategyContext *ctx, UnitPolicy policy) {
    GPT2Layout *layout = &ctx->model->layout;
    if (policy.blocks <= 1 && policy.min_params == 0) return;  // a unit per block, as the layout starts
    gpt2_layout_group_blocks(layout, policy.blocks > 0 ? policy.blocks : 1, policy.min_params);
    strategy_note(ctx, "units: the %d blocks in %d unit(s) of", layout->config.num_layers, layout->num_units - 2);
    for (int u = 1; u < layout->num_units - 1; u++)
        strategy_note(ctx, "%s%d", u == 1 ? " " : " + ", layout->unit_num_layers[u]);
    strategy_note(ctx, " blocks: a gather and a reduce each\n");
}

int prefetch_window(const GPT2Layout *layout, int prefetch) {
    int blocks = layout->num_units - 2;
    return prefetch < blocks ? prefetch : blocks;
}

int strategy_prefetch(const StrategyContext *ctx, const char *name, int prefetch) {
    const GPT2Layout *layout = &ctx->model->layout;
    int window = prefetch_window(layout, prefetch);
    if (window < prefetch)
        strategy_note(ctx, "%s: --prefetch %d reaches past the model's %d unit(s) of blocks: prefetching %d unit(s) "
                      "ahead\n", name, prefetch, layout->num_units - 2, window);
    return window;
}

void note_owner_balance(const StrategyContext *ctx, const char *name, const int *owner) {
    const GPT2Layout *layout = &ctx->model->layout;
    int world = ctx->comm->world;
    if (world == 1) return;
    size_t largest = 0, size = dtype_size(ctx->model->param_dtype);
    for (int r = 0; r < world; r++) {
        size_t bytes = owned_numel(layout, owner, r) * size;
        if (bytes > largest) largest = bytes;
    }
    double mean = (double)layout->num_params * size / world;
    strategy_note(ctx, "%s: the fullest of %d ranks owns %.2f MB of parameters, %.1f%% above the mean %.2f MB\n",
                  name, world, largest / 1e6, 100.0 * (largest / mean - 1.0), mean / 1e6);
}

void strategy_plugin_free(StrategyPlugin *plugin) {
    free(plugin->storage);
    plugin->storage = NULL;
}
