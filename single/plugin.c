// plugin.c: train_single's flags (build/train_single): the reference trainer. One
// rank, the whole model resident, no communication. The strategy trainers must
// reproduce its losses; with --as-ranks N (and the flags that say how a strategy
// averages) their bits (docs/testing.md).
//   build/train_single --config d2 --vocab 256 --data runs/data --steps 20
//   build/train_single ... --as-ranks 3                    the reference of a run at 3 ranks
#include <string.h>

#include "single/single.h"

typedef struct {
    SingleOptions options;
    CliOption flags[3];
} SinglePlugin;

StrategyPlugin single_plugin(void) {
    SinglePlugin *p = xcalloc(1, sizeof *p);
    SingleOptions *o = &p->options;
    const CliOption flags[] = {
        {"--as-ranks", "N", CLI_INT, &o->as_ranks, 1, 1 << 16,
         "be the reference of a run at N ranks, bit for bit: each rank's rows a micro-batch of its own, their "
         "gradients averaged in rank order as the strategies' reductions do (default: the whole batch at once)"},
        {"--as-groups", "M", CLI_INT, &o->as_groups, 1, 1 << 16,
         "with --as-ranks: average within groups of M consecutive ranks, then across the groups (FSDP's "
         "--shard-group M)"},
        {"--as-whole-below", "NUMEL", CLI_UINT64, &o->as_whole_below, 1, 1e15,
         "with --as-ranks: tensors of fewer than NUMEL elements averaged over all ranks at home, in place "
         "(FSDP's --shard-min-numel NUMEL)"},
    };
    _Static_assert(sizeof flags == sizeof p->flags, "one flag of the table a slot");
    memcpy(p->flags, flags, sizeof flags);
    return (StrategyPlugin){.name = "single", .init = single_init, .flags = p->flags, .num_flags = sizeof p->flags / sizeof p->flags[0],
                            .options = o, .check_options = single_options_problem, .as_ranks = &o->as_ranks,
                            .storage = p};
}
