#include "run/data.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/errors.h"

#define SHARD_HEADER_INTS 256

void token_shard_write(const char *path, const uint16_t *tokens, size_t count) {
    if (count > INT32_MAX) fatal("%s: %zu tokens do not fit one shard", path, count);
    int32_t header[SHARD_HEADER_INTS] = {TOKEN_SHARD_MAGIC, TOKEN_SHARD_VERSION, (int32_t)count};
    char tmp[4200];
    FILE *f = replace_begin(path, tmp, sizeof tmp);
    xfwrite(header, sizeof(int32_t), SHARD_HEADER_INTS, f, tmp);
    xfwrite(tokens, sizeof(uint16_t), count, f, tmp);
    replace_commit(f, tmp, path);
}

void data_dir_write_tokenizer(const char *dir, const char *tokenizer, int vocab_size) {
    char path[4200], tmp[4300];
    xsnprintf(path, sizeof path, "%s/tokenizer.txt", dir);
    FILE *f = replace_begin(path, tmp, sizeof tmp);
    if (fprintf(f, "tokenizer %s\nvocab_size %d\n", tokenizer, vocab_size) < 0) fatal("%s: write failed", tmp);
    replace_commit(f, tmp, path);
}

int data_dir_vocab(const char *dir, char *name, size_t size) {
    char path[4200];
    xsnprintf(path, sizeof path, "%s/tokenizer.txt", dir);
    if (access(path, F_OK) != 0) return 0;
    size_t len;
    char *text = xread_file(path, &len), word[64];
    int vocab = 0;
    if (sscanf(text, "tokenizer %63s vocab_size %d", word, &vocab) != 2 || vocab < 1 || vocab > 65536)
        fatal("%s: malformed (expected \"tokenizer NAME\" and \"vocab_size V\" lines, as build/prepare writes)", path);
    snprintf(name, size, "%s", word);
    free(text);
    return vocab;
}

int token_shard_parse(const unsigned char *bytes, size_t len, int vocab_size, uint16_t **tokens,
                      size_t *count, char *err, size_t err_len) {
    int32_t header[SHARD_HEADER_INTS];
    if (len < sizeof header) {
        snprintf(err, err_len, "truncated file: shorter than the 1024-byte header");
        return -1;
    }
    memcpy(header, bytes, sizeof header);
    if (header[0] != TOKEN_SHARD_MAGIC) {
        snprintf(err, err_len, "not a token shard (magic %d, expected %d)", header[0], TOKEN_SHARD_MAGIC);
        return -1;
    }
    if (header[1] != TOKEN_SHARD_VERSION) {
        snprintf(err, err_len, "unsupported token shard version %d (expected %d)", header[1], TOKEN_SHARD_VERSION);
        return -1;
    }
    if (header[2] < 0) {
        snprintf(err, err_len, "negative token count %d", header[2]);
        return -1;
    }
    size_t n = (size_t)header[2], expected = sizeof header + n * sizeof(uint16_t);
    if (len != expected) {
        snprintf(err, err_len, "header/size mismatch: header says %zu tokens (%zu bytes), file has %zu bytes%s", n,
                 expected, len, len < expected ? " (truncated)" : "");
        return -1;
    }
    uint16_t *out = malloc(n ? n * sizeof(uint16_t) : 1);
    if (!out) {
        snprintf(err, err_len, "out of memory for %zu tokens", n);
        return -1;
    }
    memcpy(out, bytes + sizeof header, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++)
        if (out[i] >= vocab_size) {
            snprintf(err, err_len, "token %zu has id %u, not below the vocab size %d", i, out[i], vocab_size);
            free(out);
            return -1;
        }
    *tokens = out;
    *count = n;
    return 0;
}

size_t token_shard_read(const char *path, int vocab_size, uint16_t **tokens) {
    FILE *f = xfopen(path, "rb");
    size_t len = (size_t)xfsize(f, path);
    unsigned char *bytes = xmalloc(len);
    xfread(bytes, 1, len, f, path);
    fclose(f);
    char err[256];
    size_t count;
    if (token_shard_parse(bytes, len, vocab_size, tokens, &count, err, sizeof err) != 0) fatal("%s: %s", path, err);
    free(bytes);
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
    free(loader->sample_order);
    free(loader->tokens);
    free(loader->inputs);
    free(loader->targets);
    memset(loader, 0, sizeof *loader);
}

void loader_reset(DataLoader *loader) { loader->position = 0; }

void loader_use_llmc_order(DataLoader *loader) {
    size_t global = (size_t)loader->B * loader->T;
    loader->num_samples = (loader->num_tokens - 1) / global;
    if (loader->num_samples > INT32_MAX)
        fatal("%zu samples of %zu tokens: more than llm.c's int permutation holds", loader->num_samples, global);
    loader->sample_order = xmalloc(loader->num_samples * sizeof(int));
    mt19937_seed(&loader->rng, 42);
    loader->next_sample = loader->num_samples;  // the first batch starts the first epoch
}

// The sample of the next batch in llm.c's order, shuffling at an epoch's start.
static size_t next_llmc_sample(DataLoader *loader) {
    if (loader->next_sample == loader->num_samples) {
        for (size_t i = 0; i < loader->num_samples; i++) loader->sample_order[i] = (int)i;
        mt19937_shuffle(&loader->rng, loader->sample_order, (int)loader->num_samples);
        loader->next_sample = 0;
    }
    return (size_t)loader->sample_order[loader->next_sample++];
}

// 1 when the next global batch (B*T tokens and the last target) fits before the
// shard's end from `position`; written so that no position can overflow it.
static int batch_fits(const DataLoader *loader, size_t global) {
    return loader->position <= loader->num_tokens && loader->num_tokens - loader->position >= global + 1;
}

void loader_skip_batches(DataLoader *loader, size_t count) {
    size_t global = (size_t)loader->B * loader->T;
    for (size_t k = 0; k < count; k++) {
        if (loader->sample_order) {
            next_llmc_sample(loader);
            continue;
        }
        if (!batch_fits(loader, global)) loader->position = 0;
        loader->position += global;
    }
}

void loader_next_batch(DataLoader *loader) {
    size_t global = (size_t)loader->B * loader->T;
    if (loader->sample_order) loader->position = next_llmc_sample(loader) * global;
    else if (!batch_fits(loader, global)) loader->position = 0;
    size_t local = global / (size_t)loader->world;
    const uint16_t *start = loader->tokens + loader->position + (size_t)loader->rank * local;
    for (size_t i = 0; i < local; i++) {
        loader->inputs[i] = start[i];
        loader->targets[i] = start[i + 1];
    }
    loader->position += global;
}
