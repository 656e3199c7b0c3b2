// train_loop.h: the training loop shared by train_single and the three strategy
// trainers, so the only difference between them is the strategy they plug in.
#ifndef SHARDLAB_TRAIN_LOOP_H
#define SHARDLAB_TRAIN_LOOP_H

#include "kit/strategy.h"

// Parses the flags (the shared ones and the strategy's), trains, logs, and
// returns the process exit status.
int train_main(int argc, char **argv, const StrategyPlugin *plugin);

#endif
