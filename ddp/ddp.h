// ddp.h: the ddp trainer's own options, set by its flags (ddp/plugin.c), and the
// ZeRO stages 1 and 2 that it also runs (ddp/zero12.c).
#ifndef SHARDLAB_DDP_H
#define SHARDLAB_DDP_H

#include "kit/kit.h"

typedef struct {
    int zero_stage;  // 0: DDP (ddp.c); 1, 2: ZeRO-1, ZeRO-2 (zero12.c)
} DdpOptions;

Strategy ddp_init(const StrategyContext *ctx);
Strategy zero12_init(const StrategyContext *ctx);
StrategyPlugin ddp_plugin(void);

#endif
