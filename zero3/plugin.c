// plugin.c: ZeRO-3's flags and their defaults (build/train_zero3).
//   mpirun -np 4 build/train_zero3 --config d2 --vocab 256 --data runs/data --steps 20
#include <string.h>

#include "zero3/zero3.h"

typedef struct {
    Zero3Options options;
    UnitPolicy units;
    CliOption flags[8];
} Zero3Plugin;

static const char *check_options(const void *options) {
    return wire_problem(&((const Zero3Options *)options)->wire);
}

StrategyPlugin zero3_plugin(void) {
    Zero3Plugin *p = xcalloc(1, sizeof *p);
    p->options = (Zero3Options){.prefetch = 1};
    const CliOption flags[] = {
        {"--prefetch", "D", CLI_INT, &p->options.prefetch, 0, 1 << 20,
         "start the broadcasts of the next D units while one computes, and reduce a unit's gradients behind the "
         "next unit's backward (default 1; 0: every collective waited for at once)"},
        UNIT_POLICY_FLAGS(p->units),
        ZEROPP_FLAGS(p->options.wire.zeropp),
    };
    _Static_assert(sizeof flags == sizeof p->flags, "one flag of the table a slot");
    memcpy(p->flags, flags, sizeof flags);
    return (StrategyPlugin){.name = "zero3", .init = zero3_init, .flags = p->flags, .num_flags = sizeof p->flags / sizeof p->flags[0],
                            .options = &p->options, .check_options = check_options, .units = &p->units,
                            .node_group = &p->options.wire.zeropp.secondary_shard_group,
                            .grads_node_group = &p->options.wire.zeropp.quantize_grads_node, .storage = p};
}
