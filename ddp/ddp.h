// ddp.h: the ddp trainer's own options, set by its flags in examples/train_ddp.c,
// and the ZeRO stages 1 and 2 that it also runs (ddp/zero12.c).
#ifndef SHARDLAB_DDP_H
#define SHARDLAB_DDP_H

#include "../common/partition.h"
#include "../common/strategy.h"

typedef struct {
    int zero_stage;  // 0: DDP (ddp.c); 1, 2: ZeRO-1, ZeRO-2 (zero12.c)
} DdpOptions;

Strategy zero12_init(const StrategyContext *ctx);

#endif
