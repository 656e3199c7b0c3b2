// train_loop.h: the training loop shared by train_single and the three strategy
// trainers, so the only difference between them is the strategy they plug in.
#ifndef SHARDLAB_TRAIN_LOOP_H
#define SHARDLAB_TRAIN_LOOP_H

#include "strategy.h"

// Parses the flags, trains, logs, and returns the process exit status.
int train_main(int argc, char **argv, const char *strategy_name,
               Strategy (*strategy_init)(const StrategyContext *ctx));

#endif
