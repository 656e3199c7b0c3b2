// train_zero3: trains GPT-2 with the zero3 strategy; launch with mpirun -np N.
//   mpirun -np 4 build/train_zero3 --config d2 --vocab 256 --data runs/data --steps 20
#include "../common/train_loop.h"
#include "../zero3/zero3.h"

int main(int argc, char **argv) {
    Zero3Options zero3 = {.prefetch = 1};
    UnitPolicy units = {0, 0};
    const CliOption flags[] = {
        {"--prefetch", "D", CLI_INT, &zero3.prefetch, 0, 1 << 20,
         "start the broadcasts of the next D units while one computes, and reduce a unit's gradients behind the "
         "next unit's backward (default 1; 0: every collective waited for at once)"},
        UNIT_POLICY_FLAGS(units),
    };
    StrategyPlugin plugin = {.name = "zero3", .init = zero3_init, .flags = flags,
                             .num_flags = sizeof flags / sizeof flags[0], .options = &zero3, .units = &units};
    return train_main(argc, argv, &plugin);
}
