// plugin.c: the ddp trainer's flags and their defaults (build/train_ddp): DDP,
// or ZeRO stage 1 or 2 with --zero-stage.
//   mpirun -np 4 build/train_ddp --config d2 --vocab 256 --data runs/data --steps 20
//   mpirun -np 4 build/train_ddp --zero-stage 2 --config d2 --vocab 256 --data runs/data --steps 20
#include "ddp/ddp.h"

typedef struct {
    DdpOptions options;
    CliOption flags[1];
} DdpPlugin;

// Stage 0 is plain DDP; stages 1 and 2 shard what DDP replicates.
static Strategy init_by_stage(const StrategyContext *ctx) {
    const DdpOptions *ddp = ctx->options;
    return ddp->zero_stage == 0 ? ddp_init(ctx) : zero12_init(ctx);
}

// Stage 3 shards the parameters too, which this trainer's replica cannot: it has
// trainers of its own.
static const char *check_stage(const void *options) {
    const DdpOptions *ddp = options;
    return ddp->zero_stage == 3 ? "--zero-stage 3: ZeRO-3 has trainers of its own: mpirun ... build/train_zero3 "
                                  "(whole tensors, each on one owner) or build/train_fsdp (every tensor sliced)"
                                : NULL;
}

StrategyPlugin ddp_plugin(void) {
    DdpPlugin *p = xcalloc(1, sizeof *p);
    p->options = (DdpOptions){.zero_stage = 0};
    p->flags[0] = (CliOption){"--zero-stage", "0|1|2", CLI_INT, &p->options.zero_stage, 0, 3,
                              "0: DDP (default); 1: ZeRO-1, AdamW state sharded; 2: ZeRO-2, gradients sharded too"};
    return (StrategyPlugin){.name = "ddp", .init = init_by_stage, .flags = p->flags,
                            .num_flags = sizeof p->flags / sizeof p->flags[0], .options = &p->options,
                            .check_options = check_stage, .storage = p};
}
