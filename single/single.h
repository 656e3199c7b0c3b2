// single.h: train_single's own options, set by its flags (single/plugin.c): the
// run at N ranks it is the bitwise reference of (single/single.c).
#ifndef SHARDLAB_SINGLE_H
#define SHARDLAB_SINGLE_H

#include <stdint.h>

#include "kit/kit.h"

typedef struct {
    int as_ranks;             // --as-ranks N (0: the whole batch at once)
    int as_groups;            // --as-groups M (0: one group of N)
    uint64_t as_whole_below;  // --as-whole-below NUMEL (0: none)
} SingleOptions;

// NULL, or what is wrong with the options once parsed.
const char *single_options_problem(const void *options);
Strategy single_init(const StrategyContext *ctx);
StrategyPlugin single_plugin(void);

#endif
