// libFuzzer target: the token shard reader must reject or accept any bytes
// without crashing, and every token it accepts must be below the vocab size.
#include <stdint.h>
#include <stdlib.h>

#include "run/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint16_t *tokens;
    size_t count;
    char err[256];
    if (token_shard_parse(data, size, 300, &tokens, &count, err, sizeof err) != 0) return 0;
    for (size_t i = 0; i < count; i++)
        if (tokens[i] >= 300) abort();
    free(tokens);
    return 0;
}
