// zero3.h: ZeRO-3's own options, set by its flags (zero3/plugin.c).
#ifndef SHARDLAB_ZERO3_H
#define SHARDLAB_ZERO3_H

#include "kit/kit.h"

typedef struct {
    int prefetch;          // units ahead whose broadcasts are started before they run (0: none)
    WireOptions wire;      // how the collectives travel: ZeRO++'s flags (kit/wire.h)
} Zero3Options;

Strategy zero3_init(const StrategyContext *ctx);
StrategyPlugin zero3_plugin(void);

#endif
