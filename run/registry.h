// registry.h: the strategies of the ZeRO ladder as the planner, make check, the
// labs and the report know them (build/plan --strategies prints this table).
// Each is a strategy folder's plugin (kit/strategy.h) and the flags of its
// trainer that make it this strategy; one folder may give several (ddp/: DDP,
// ZeRO-1, ZeRO-2). A new strategy is its folder and one line in run/registry.c.
#ifndef SHARDLAB_REGISTRY_H
#define SHARDLAB_REGISTRY_H

#include <stddef.h>

#include "kit/strategy.h"

// What a strategy divides by N of the ZeRO paper's model states (plan --params).
enum { SHARDS_NONE = 0, SHARDS_OPTIM = 1, SHARDS_GRADS = 2, SHARDS_PARAMS = 4 };

// How a strategy places what it shards, as the planner draws and lists it.
typedef enum {
    PLACED_REPLICATED = 0,  // every rank holds everything: every rank alike
    PLACED_FLAT_RANGES,     // the flat model cut into N equal ranges (partition.h's flat_range)
    PLACED_WHOLE_TENSORS,   // each tensor whole on one owner (whole_tensor_owners): ranks hold different amounts
    PLACED_ROW_SLICES,      // every tensor cut along dim 0 into N slices (row_slice_rows)
} Placement;

typedef struct {
    const char *name;                // "zero1": in logs, plans, make check STRATEGY=, the report
    const char *title;               // "ZeRO-1": in the report's prose and legends
    const char *folder;              // "ddp": its trainer is build/train_<folder>
    StrategyPlugin (*plugin)(void);  // the folder's plugin
    const char *preset;              // the trainer flags that make it this strategy ("--zero-stage 1"; "": none)
    const char *reference;           // train_single's flags (with --as-ranks N) that make its bitwise reference
    int shards;                      // SHARDS_*: the model states it divides by N
    Placement placement;             // where what it divides lives
} RegisteredStrategy;

extern const RegisteredStrategy registered_strategies[];
extern const int num_registered_strategies;

// The strategy called `name`, or NULL.
const RegisteredStrategy *registry_find(const char *name);
// "ddp, zero1, zero2, zero3 or fsdp": the names, for messages, written into
// names[size]; returns names.
const char *registry_names(char *names, size_t size);
// The strategy's plugin with its preset flags applied (strategy_plugin_free after).
StrategyPlugin registry_plugin(const RegisteredStrategy *strategy);

#endif
