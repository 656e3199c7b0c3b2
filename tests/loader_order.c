// loader_order: prints the batches a DataLoader yields, for tests/test_training.py
// to hold against its own re-implementation of llm.c's shuffled order.
//   loader_order SHARD B T RANK WORLD sequential|llmc SKIP COUNT
// skips SKIP batches (loader_skip_batches), then prints COUNT batches, one line
// each: this rank's inputs, then its targets, as space-separated ids.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run/data.h"
#include "util/errors.h"

int main(int argc, char **argv) {
    if (argc != 9) fatal("usage: %s SHARD B T RANK WORLD sequential|llmc SKIP COUNT", argv[0]);
    int B = atoi(argv[2]), T = atoi(argv[3]), rank = atoi(argv[4]), world = atoi(argv[5]);
    DataLoader loader;
    loader_init(&loader, argv[1], 65536, B, T, rank, world);
    if (strcmp(argv[6], "llmc") == 0) loader_use_llmc_order(&loader);
    loader_skip_batches(&loader, (size_t)atol(argv[7]));
    size_t local = (size_t)(B / world) * T;
    for (long k = 0; k < atol(argv[8]); k++) {
        loader_next_batch(&loader);
        for (size_t i = 0; i < local; i++) printf("%d ", loader.inputs[i]);
        for (size_t i = 0; i < local; i++) printf("%s%d", i ? " " : "", loader.targets[i]);
        printf("\n");
    }
    loader_free(&loader);
    return 0;
}
