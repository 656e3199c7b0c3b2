// plugin.c: FSDP's flags and their defaults (build/train_fsdp).
//   mpirun -np 4 build/train_fsdp --config d2 --vocab 256 --data runs/data --steps 20
#include <string.h>

#include "fsdp/fsdp.h"

typedef struct {
    FsdpOptions options;
    UnitPolicy units;
    CliOption flags[11];
} FsdpPlugin;

static const char *check_options(const void *options) {
    const FsdpOptions *fsdp = options;
    if (fsdp->wire.zeropp.secondary_shard_group && !fsdp->reshard_after_forward)
        return "--secondary-shard-group keeps a unit's rows for a backward gather that --reshard-after-forward 0 "
               "does not make: it would do nothing";
    return wire_problem(&fsdp->wire);
}

StrategyPlugin fsdp_plugin(void) {
    FsdpPlugin *p = xcalloc(1, sizeof *p);
    p->options = (FsdpOptions){.reshard_after_forward = 1, .prefetch = 1};
    const CliOption flags[] = {
        {"--reshard-after-forward", "0|1", CLI_INT, &p->options.reshard_after_forward, 0, 1,
         "free a unit's gathered parameters after its forward (1, default) or keep them for backward (0)"},
        {"--prefetch", "D", CLI_INT, &p->options.prefetch, 0, 1 << 20,
         "start the all-gathers of the next D units while one computes, and reduce a unit's gradients behind the "
         "next unit's backward (default 1; 0: every collective waited for at once)"},
        {"--shard-group", "M", CLI_INT, &p->options.wire.shard_group, 0, 1 << 24,
         "hybrid sharding: shard within groups of M consecutive ranks (M divides N) and all-reduce the sharded "
         "gradients across the N/M groups (default 0: M = N, one group)"},
        {"--shard-min-numel", "NUMEL", CLI_UINT64, &p->options.wire.shard_min_numel, 0, 1e15,
         "keep the tensors of fewer than NUMEL elements whole on every rank, their gradients all-reduced, and "
         "slice the rest (default 0: slice every tensor)"},
        UNIT_POLICY_FLAGS(p->units),
        ZEROPP_FLAGS(p->options.wire.zeropp),
    };
    _Static_assert(sizeof flags == sizeof p->flags, "one flag of the table a slot");
    memcpy(p->flags, flags, sizeof flags);
    return (StrategyPlugin){.name = "fsdp", .init = fsdp_init, .flags = p->flags, .num_flags = sizeof p->flags / sizeof p->flags[0],
                            .options = &p->options, .check_options = check_options, .units = &p->units,
                            .shard_group = &p->options.wire.shard_group,
                            .node_group = &p->options.wire.zeropp.secondary_shard_group,
                            .grads_node_group = &p->options.wire.zeropp.quantize_grads_node, .whole_below = &p->options.wire.shard_min_numel,
                            .storage = p};
}
