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

#include "util/mt19937.h"

#define TOKEN_SHARD_MAGIC 20240520
#define TOKEN_SHARD_VERSION 1

void token_shard_write(const char *path, const uint16_t *tokens, size_t count);

// A prepared data directory says which tokenizer made its shards, so that a
// trainer's model gets their vocabulary: DIR/tokenizer.txt holds
// "tokenizer <name>" and "vocab_size <V>" (build/prepare writes it).
void data_dir_write_tokenizer(const char *dir, const char *tokenizer, int vocab_size);
// V from DIR/tokenizer.txt, and the tokenizer's name into `name`; 0 when the
// directory has no such file (shards written by other means).
int data_dir_vocab(const char *dir, char *name, size_t size);
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
    // llm.c's order (loader_use_llmc_order); sequential when sample_order is NULL
    Mt19937 rng;
    int *sample_order;  // (num_samples) this epoch's order of the shard's samples
    size_t num_samples; // samples of B*T+1 tokens at multiples of B*T: (num_tokens - 1) / (B*T)
    size_t next_sample; // index into sample_order; num_samples: start a new epoch
} DataLoader;

void loader_init(DataLoader *loader, const char *path, int vocab_size, int B, int T, int rank,
                 int world);
void loader_free(DataLoader *loader);
// Fills inputs/targets with this rank's rows of the next global batch. In the
// sequential order (the default) the batches follow one another through the
// shard, wrapping to its start when the next one would run past its end.
void loader_next_batch(DataLoader *loader);
// Back to the shard's start (sequential order; the validation loader).
void loader_reset(DataLoader *loader);

// Switches to the order of llm.c's training loader (dataloader.h): sample i is
// the B*T+1 tokens at i*B*T; each epoch, starting from the first batch, takes
// the samples in the order of a fresh llm.c random_permutation of 0..n-1 on an
// MT19937 seeded once with 42 (llm.c's single-process stream; with one shard,
// its shard permutation draws nothing). Every rank draws the same stream and
// takes its rows of the global batch, as in the sequential order.
void loader_use_llmc_order(DataLoader *loader);
// Advances past `count` batches without reading them: the state after
// `count` steps, for resuming (llm.c's order is a function of the batch count).
void loader_skip_batches(DataLoader *loader, size_t count);

#endif
