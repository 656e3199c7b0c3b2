#include "data.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define SHARD_HEADER_INTS 256

void token_shard_write(const char *path, const uint16_t *tokens, size_t count) {
    if (count > INT32_MAX) fatal("%s: %zu tokens do not fit one shard", path, count);
    int32_t header[SHARD_HEADER_INTS] = {TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION, (int32_t)count};
    FILE *f = xfopen(path, "wb");
    xfwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, f, path);
    xfwrite(tokens, sizeof(uint16_t), count, f, path);
    xfclose(f, path);
}

size_t token_shard_read(const char *path, int vocab_size, uint16_t **tokens) {
    FILE *f = xfopen(path, "rb");
    int32_t header[SHARD_HEADER_INTS];
    if (fread(header, sizeof(int32_t), SHARD_HEADER_INTS, f) != SHARD_HEADER_INTS)
        fatal("%s: truncated file: shorter than the 1024-byte header", path);
    if (header[0] != TOKEN_SHARD_MAGIC)
        fatal("%s: not a token shard (magic %d, expected %d)", path, header[0], TOKEN_SHARD_MAGIC);
    if (header[1] != TOKEN_SHARD_VERSION)
        fatal("%s: unsupported token shard version %d (expected %d)", path, header[1],
              TOKEN_SHARD_VERSION);
    if (header[2] < 0) fatal("%s: negative token count %d", path, header[2]);
    size_t count = (size_t)header[2];
    long expected = (long)(SHARD_HEADER_INTS * sizeof(int32_t) + count * sizeof(uint16_t));
    long actual = xfsize(f, path);
    if (actual != expected)
        fatal("%s: header/size mismatch: header says %zu tokens (%ld bytes), file has %ld bytes%s",
              path, count, expected, actual, actual < expected ? " (truncated)" : "");
    *tokens = xmalloc(count * sizeof(uint16_t));
    xfread(*tokens, sizeof(uint16_t), count, f, path);
    fclose(f);
    for (size_t i = 0; i < count; i++)
        if ((*tokens)[i] >= vocab_size)
            fatal("%s: token %zu has id %u, not below the vocab size %d", path, i, (*tokens)[i],
                  vocab_size);
    return count;
}

void loader_init(DataLoader *loader, const char *path, int vocab_size, int B, int T, int rank,
                 int world) {
    memset(loader, 0, sizeof *loader);
    if (B % world != 0)
        fatal("--batch %d is not divisible by the number of ranks %d", B, world);
    loader->num_tokens = token_shard_read(path, vocab_size, &loader->tokens);
    if (loader->num_tokens < (size_t)B * T + 1)
        fatal("%s: %zu tokens are too few for one batch of %d x %d (+1)", path, loader->num_tokens,
              B, T);
    loader->B = B;
    loader->T = T;
    loader->rank = rank;
    loader->world = world;
    size_t local = (size_t)(B / world) * T;
    loader->inputs = xmalloc(local * sizeof(int));
    loader->targets = xmalloc(local * sizeof(int));
}

void loader_free(DataLoader *loader) {
    free(loader->tokens);
    free(loader->inputs);
    free(loader->targets);
    memset(loader, 0, sizeof *loader);
}

void loader_reset(DataLoader *loader) { loader->position = 0; }

void loader_next_batch(DataLoader *loader) {
    size_t global = (size_t)loader->B * loader->T;
    if (loader->position + global + 1 > loader->num_tokens) loader->position = 0;
    size_t local = global / (size_t)loader->world;
    const uint16_t *start = loader->tokens + loader->position + (size_t)loader->rank * local;
    for (size_t i = 0; i < local; i++) {
        loader->inputs[i] = start[i];
        loader->targets[i] = start[i + 1];
    }
    loader->position += global;
}
