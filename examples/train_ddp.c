// train_ddp: trains GPT-2 with the ddp strategy; launch with mpirun -np N.
//   mpirun -np 4 build/train_ddp --config d2 --vocab 256 --data runs/data --steps 20
#include "../common/train_loop.h"

int main(int argc, char **argv) {
    StrategyPlugin plugin = {.name = "ddp", .init = ddp_init};
    return train_main(argc, argv, &plugin);
}
