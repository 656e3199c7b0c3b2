// fsdp.h: FSDP's own options, set by its flags (fsdp/plugin.c).
#ifndef SHARDLAB_FSDP_H
#define SHARDLAB_FSDP_H

#include <stdint.h>

#include "kit/kit.h"

typedef struct {
    int reshard_after_forward;  // free a unit's gathered parameters after its forward (1) or keep them (0)
    int prefetch;               // units ahead whose all-gather is started before they run (0: none)
    WireOptions wire;           // how the collectives travel: --shard-group, --shard-min-numel, ZeRO++'s (kit/wire.h)
} FsdpOptions;

Strategy fsdp_init(const StrategyContext *ctx);
StrategyPlugin fsdp_plugin(void);

#endif
