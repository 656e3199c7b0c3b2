// train_single: the reference trainer. One rank, the whole model resident, no
// communication. The strategy trainers must reproduce its losses.
//   build/train_single --config d2 --vocab 256 --data runs/data --steps 20
#include "../common/train_loop.h"

int main(int argc, char **argv) {
    StrategyPlugin plugin = {.name = "single", .init = single_init};
    return train_main(argc, argv, &plugin);
}
