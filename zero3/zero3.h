// zero3.h: ZeRO-3's own options, set by its flags in examples/train_zero3.c.
#ifndef SHARDLAB_ZERO3_H
#define SHARDLAB_ZERO3_H

typedef struct {
    int prefetch;  // units ahead whose broadcasts are started before they run (0: none)
} Zero3Options;

#endif
