// train_<folder>: trains GPT-2 with the strategy of one folder (its plugin.c:
// the flags and their defaults, kit/strategy.h); launch with mpirun -np N. The
// Makefile builds this file once for each folder with a plugin.c, as
// build/train_ddp, build/train_zero3, build/train_fsdp, build/train_single.
//   mpirun -np 4 build/train_fsdp --config d2 --vocab 256 --data runs/data --steps 20
// The test drivers start each job once and send it many runs: --serve (run/serve.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/serve.h"
#include "run/train_loop.h"

#ifndef STRATEGY
#error "build with -DSTRATEGY=folder (the Makefile does)"
#endif
#define PLUGIN_OF(folder) STRATEGY_PLUGIN(folder)
StrategyPlugin PLUGIN_OF(STRATEGY)(void);

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--serve") == 0)  // one job, many runs (run/serve.h)
        return train_serve(argv[2], &argc, &argv, PLUGIN_OF(STRATEGY));
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--serve") == 0) {  // said by one rank (MPI has not started: mpirun's variable)
            const char *rank = getenv("OMPI_COMM_WORLD_RANK");
            if (!rank || strcmp(rank, "0") == 0)
                fprintf(stderr, "shardlab: --serve DIR is given alone: the runs it serves bring their own flags\n");
            return 1;
        }
    StrategyPlugin plugin = PLUGIN_OF(STRATEGY)();
    int status = train_main(argc, argv, &plugin);
    strategy_plugin_free(&plugin);
    return status;
}
