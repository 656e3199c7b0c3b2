// train_single: the reference trainer. One rank, the whole model resident, no
// communication. The strategy trainers must reproduce its losses; with --as-ranks N
// (and the flags that say how a strategy averages) their bits (docs/testing.md).
//   build/train_single --config d2 --vocab 256 --data runs/data --steps 20
//   build/train_single ... --as-ranks 3 --as-reduce use    the reference of train_fsdp at 3 ranks
#include "../common/train_loop.h"

int main(int argc, char **argv) {
    SingleOptions single = {0};
    const CliOption flags[] = {
        {"--as-ranks", "N", CLI_INT, &single.as_ranks, 1, 1 << 16,
         "be the reference of a run at N ranks, bit for bit: each rank's rows a micro-batch of its own, their "
         "gradients averaged in rank order as the strategies' reductions do (default: the whole batch at once)"},
        {"--as-reduce", "home|use", CLI_STRING, &single.as_reduce, 0, 0,
         "with --as-ranks: average a tensor's gradient once, after the unit it is at home in (home: DDP, ZeRO-1/2; "
         "default), or after each unit that reads it (use: ZeRO-3, FSDP)"},
        {"--as-groups", "M", CLI_INT, &single.as_groups, 1, 1 << 16,
         "with --as-ranks: average within groups of M consecutive ranks, then across the groups (FSDP's "
         "--shard-group M)"},
        {"--as-whole-below", "NUMEL", CLI_UINT64, &single.as_whole_below, 1, 1e15,
         "with --as-ranks: tensors of fewer than NUMEL elements averaged over all ranks at home, in place "
         "(FSDP's --shard-min-numel NUMEL)"},
    };
    StrategyPlugin plugin = {.name = "single", .init = single_init, .flags = flags,
                             .num_flags = sizeof flags / sizeof flags[0], .options = &single,
                             .check_options = single_options_problem, .as_ranks = &single.as_ranks};
    return train_main(argc, argv, &plugin);
}
