// fsdp.h: FSDP's own options, set by its flags (fsdp/plugin.c).
#ifndef SHARDLAB_FSDP_H
#define SHARDLAB_FSDP_H

#include <stdint.h>

#include "kit/kit.h"

typedef struct {
    int reshard_after_forward;  // free a unit's gathered parameters after its forward (1) or keep them (0)
    int prefetch;               // units ahead whose all-gather is started before they run (0: none)
    int shard_group;            // S: ranks that shard the model among them (0: all N); the N/S groups of S
                                // consecutive ranks are replicas that all-reduce their reduced slices (hybrid)
    uint64_t shard_min_numel;   // tensors of fewer elements are kept whole on every rank (0: none; replicas.h)
    ZeroppOptions zeropp;       // ZeRO++'s changes to the collectives (kit/zeropp.h)
} FsdpOptions;

Strategy fsdp_init(const StrategyContext *ctx);
StrategyPlugin fsdp_plugin(void);

#endif
