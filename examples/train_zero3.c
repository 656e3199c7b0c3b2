// train_zero3: trains GPT-2 with the zero3 strategy; launch with mpirun -np N.
//   mpirun -np 4 build/train_zero3 --config d2 --vocab 256 --data runs/data --steps 20
#include "../common/train_loop.h"

int main(int argc, char **argv) {
    StrategyPlugin plugin = {.name = "zero3", .init = zero3_init};
    return train_main(argc, argv, &plugin);
}
