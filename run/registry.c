// registry.c: the strategies, one line each (registry.h).
#include "run/registry.h"

#include <stdio.h>
#include <string.h>

#include "util/errors.h"

#define SHARDS_ALL (SHARDS_OPTIM | SHARDS_GRADS | SHARDS_PARAMS)

// The strategies, one line each, up the ladder:
//   X(name, title, folder, preset, reference, shards, placement)
#define STRATEGIES(X)                                                                                           \
    X("ddp", "DDP", ddp, "", "--accum-mode no-sync", SHARDS_NONE, PLACED_REPLICATED)                            \
    X("zero1", "ZeRO-1", ddp, "--zero-stage 1", "--accum-mode no-sync", SHARDS_OPTIM, PLACED_FLAT_RANGES)       \
    X("zero2", "ZeRO-2", ddp, "--zero-stage 2", "", SHARDS_OPTIM | SHARDS_GRADS, PLACED_FLAT_RANGES)            \
    X("zero3", "ZeRO-3", zero3, "", "", SHARDS_ALL, PLACED_WHOLE_TENSORS)                                      \
    X("fsdp", "FSDP", fsdp, "", "", SHARDS_ALL, PLACED_ROW_SLICES)

// Each folder's plugin (its plugin.c), declared from the lines above.
#define DECLARE(name, title, folder, preset, reference, shards, placement) StrategyPlugin STRATEGY_PLUGIN(folder)(void);
STRATEGIES(DECLARE)

#define ENTRY(name, title, folder, preset, reference, shards, placement) \
    {name, title, #folder, STRATEGY_PLUGIN(folder), preset, reference, shards, placement},
const RegisteredStrategy registered_strategies[] = {STRATEGIES(ENTRY)};
const int num_registered_strategies = sizeof registered_strategies / sizeof registered_strategies[0];

const RegisteredStrategy *registry_find(const char *name) {
    for (int i = 0; i < num_registered_strategies; i++)
        if (strcmp(registered_strategies[i].name, name) == 0) return &registered_strategies[i];
    return NULL;
}

const char *registry_names(char *names, size_t size) {
    size_t used = 0;
    names[0] = 0;
    for (int i = 0; i < num_registered_strategies; i++) {
        const char *sep = i == 0 ? "" : i == num_registered_strategies - 1 ? " or " : ", ";
        used += (size_t)snprintf(names + used, size - used, "%s%s", sep, registered_strategies[i].name);
        CHECK(used < size, "registry_names: more names than %zu characters", size);
    }
    return names;
}

StrategyPlugin registry_plugin(const RegisteredStrategy *strategy) {
    StrategyPlugin plugin = strategy->plugin();
    char preset[256], *argv[16] = {"preset"};
    int argc = 1;
    CHECK(strlen(strategy->preset) < sizeof preset, "%s: preset too long", strategy->name);
    strcpy(preset, strategy->preset);
    for (char *word = strtok(preset, " "); word; word = strtok(NULL, " ")) {
        CHECK(argc < 16, "%s: more than 15 preset words", strategy->name);
        argv[argc++] = word;
    }
    CliSpec spec = {.synopsis = "", .about = "", .options = plugin.flags, .num_options = plugin.num_flags};
    CHECK(cli_parse(&spec, argc, argv, 1) == CLI_RUN, "%s: its preset '%s' is not its trainer's flags", strategy->name,
          strategy->preset);
    return plugin;
}
