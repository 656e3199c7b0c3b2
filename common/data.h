// data.h: llm.c token shards and the data-parallel batch loader.
//
// Shard file: int32 header[256] = {20240520, 1, ntok, 0...}, then ntok uint16 ids.
//
// A global batch is B sequences of T tokens (plus one for the last target),
// read from the shard at the loader's position. Rank r of N takes rows
// [r*B/N, (r+1)*B/N) of it, so N ranks together read exactly what one rank
// with the whole batch reads:
//
//   shard:  ... | row 0 | row 1 | row 2 | row 3 | +1 | ...
//                 rank 0 (B=4, N=2) |  rank 1
#ifndef SHARDLAB_DATA_H
#define SHARDLAB_DATA_H

#include <stddef.h>
#include <stdint.h>

#define TOKEN_SHARD_MAGIC 20240520
#define TOKEN_SHARD_VERSION 1

void token_shard_write(const char *path, const uint16_t *tokens, size_t count);
// Checks a shard held in memory and copies its tokens into *tokens (malloc'ed);
// returns -1 with a message in err instead of exiting (so it can be fuzzed).
int token_shard_parse(const unsigned char *bytes, size_t len, int vocab_size, uint16_t **tokens,
                      size_t *count, char *err, size_t err_len);
// Reads a whole shard; every id must be < vocab_size. Returns the token count.
size_t token_shard_read(const char *path, int vocab_size, uint16_t **tokens);

typedef struct {
    uint16_t *tokens;   // (num_tokens) the whole shard
    size_t num_tokens;
    int B, T;           // global batch rows, sequence length
    int rank, world;    // this rank's slice: rows [rank*B/world, (rank+1)*B/world)
    size_t position;    // start of the next global batch in tokens
    int *inputs;        // (B/world, T)
    int *targets;       // (B/world, T)
} DataLoader;

void loader_init(DataLoader *loader, const char *path, int vocab_size, int B, int T, int rank,
                 int world);
void loader_free(DataLoader *loader);
// Fills inputs/targets with this rank's rows of the next global batch, wrapping
// to the start of the shard when the batch would run past its end.
void loader_next_batch(DataLoader *loader);
void loader_reset(DataLoader *loader);

#endif
