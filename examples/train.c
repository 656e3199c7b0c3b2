// train_<folder>: trains GPT-2 with the strategy of one folder (its plugin.c:
// the flags and their defaults, kit/strategy.h); launch with mpirun -np N. The
// Makefile builds this file once for each folder with a plugin.c, as
// build/train_ddp, build/train_zero3, build/train_fsdp, build/train_single.
//   mpirun -np 4 build/train_fsdp --config d2 --vocab 256 --data runs/data --steps 20
#include "run/train_loop.h"

#ifndef STRATEGY
#error "build with -DSTRATEGY=folder (the Makefile does)"
#endif
#define PLUGIN_OF(folder) STRATEGY_PLUGIN(folder)
StrategyPlugin PLUGIN_OF(STRATEGY)(void);

int main(int argc, char **argv) {
    StrategyPlugin plugin = PLUGIN_OF(STRATEGY)();
    int status = train_main(argc, argv, &plugin);
    strategy_plugin_free(&plugin);
    return status;
}
