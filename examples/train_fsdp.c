// train_fsdp: trains GPT-2 with the fsdp strategy; launch with mpirun -np N.
//   mpirun -np 4 build/train_fsdp --config d2 --vocab 256 --data runs/data --steps 20
#include "../common/train_loop.h"
#include "../fsdp/fsdp.h"

int main(int argc, char **argv) {
    FsdpOptions fsdp = {.reshard_after_forward = 1, .prefetch = 1, .shard_group = 0};
    UnitPolicy units = {0, 0};
    const CliOption flags[] = {
        {"--reshard-after-forward", "0|1", CLI_INT, &fsdp.reshard_after_forward, 0, 1,
         "free a unit's gathered parameters after its forward (1, default) or keep them for backward (0)"},
        {"--prefetch", "D", CLI_INT, &fsdp.prefetch, 0, 1 << 20,
         "start the all-gathers of the next D units while one computes, and reduce a unit's gradients behind the "
         "next unit's backward (default 1; 0: every collective waited for at once)"},
        {"--shard-group", "M", CLI_INT, &fsdp.shard_group, 0, 1 << 24,
         "hybrid sharding: shard within groups of M consecutive ranks (M divides N) and all-reduce the sharded "
         "gradients across the N/M groups (default 0: M = N, one group)"},
        {"--shard-min-numel", "NUMEL", CLI_UINT64, &fsdp.shard_min_numel, 0, 1e15,
         "keep the tensors of fewer than NUMEL elements whole on every rank, their gradients all-reduced, and "
         "slice the rest (default 0: slice every tensor)"},
        UNIT_POLICY_FLAGS(units),
    };
    StrategyPlugin plugin = {.name = "fsdp", .init = fsdp_init, .flags = flags,
                             .num_flags = sizeof flags / sizeof flags[0], .options = &fsdp, .units = &units};
    return train_main(argc, argv, &plugin);
}
