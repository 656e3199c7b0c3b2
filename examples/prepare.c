// prepare: turns a text file into llm.c token shards for training.
//   build/prepare --text FILE --tokenizer byte|gpt2 [--vocab DIR] --out DIR
// writes DIR/train.bin (the first 90% of the tokens), DIR/val.bin (the rest), and
// DIR/tokenizer.txt (which tokenizer, and its vocabulary: the trainers take --vocab from it).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/cli.h"
#include "run/data.h"
#include "util/errors.h"
#include "run/tokenizer.h"

// mkdir -p: the output directory and any missing parents.
static void make_directories(const char *path) {
    char partial[4096];
    xsnprintf(partial, sizeof partial, "%s", path);
    for (char *slash = partial + 1;; slash++) {
        if (*slash != '/' && *slash != '\0') continue;
        char saved = *slash;
        *slash = '\0';
        if (mkdir(partial, 0755) != 0 && errno != EEXIST) {
            if (saved == '\0') fatal("%s: cannot create directory: %s", path, strerror(errno));
            fatal("%s: cannot create its parent directory %s: %s", path, partial, strerror(errno));
        }
        if (saved == '\0') break;
        *slash = saved;
    }
}

// The outputs are written beside and renamed over (PATH.tmp, then PATH): the text read must be none of them,
// by its identity (a link, another spelling), or it would be replaced by tokens.
static void check_text_is_no_output(const char *text_path, const char *out) {
    static const char *const names[] = {"train.bin", "val.bin", "tokenizer.txt"};
    struct stat text, st;
    if (stat(text_path, &text) != 0) fatal("--text %s: %s", text_path, strerror(errno));
    for (int i = 0; i < 3; i++)
        for (int tmp = 0; tmp < 2; tmp++) {
            char path[4200];
            xsnprintf(path, sizeof path, "%s/%s%s", out, names[i], tmp ? ".tmp" : "");
            if (stat(path, &st) == 0 && st.st_dev == text.st_dev && st.st_ino == text.st_ino)
                fatal("--text %s: that is %s, which --out %s writes: give the text a path outside it, or another "
                      "--out", text_path, path, out);
        }
}

int main(int argc, char **argv) {
    const char *text_path = NULL, *kind = NULL, *vocab = NULL, *out = NULL;
    const CliOption options[] = {
        {"--text", "FILE", CLI_STRING, &text_path, 0, 0, "the text to tokenize"},
        {"--tokenizer", "byte|gpt2", CLI_STRING, &kind, 0, 0, "byte: V = 256; gpt2: GPT-2's BPE (V = 50257)"},
        {"--vocab", "DIR", CLI_STRING, &vocab, 0, 0, "gpt2 only: DIR/encoder.json and DIR/vocab.bpe"},
        {"--out", "DIR", CLI_STRING, &out, 0, 0, "writes DIR/train.bin (first 90% of the tokens) and DIR/val.bin"},
    };
    CliSpec spec = {.synopsis = "--text FILE --tokenizer byte|gpt2 [--vocab DIR] --out DIR",
                    .about = "turns a text file into llm.c token shards for training",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    if (!text_path || !kind || !out) fatal("--text, --tokenizer and --out are required (%s --help)", argv[0]);
    Tokenizer tok;
    tokenizer_init(&tok, kind, vocab);
    FILE *f = xfopen(text_path, "rb");
    long size = xfsize(f, text_path);
    char *text = xmalloc((size_t)size + 1);
    xfread(text, 1, (size_t)size, f, text_path);
    fclose(f);
    int *ids = NULL;
    size_t count = 0, capacity = 0;
    const size_t chunk = 4 << 20;  // encode 4 MB at a time, to show progress on large texts
    for (size_t at = 0; at < (size_t)size;) {
        size_t end = tokenizer_chunk_end(&tok, text, (size_t)size, at, chunk);
        tokenizer_encode(&tok, text + at, end - at, &ids, &count, &capacity);
        at = end;
        if ((size_t)size > 2 * chunk)
            fprintf(stderr, "\rprepare: %3.0f%% of %.1f MB", 100.0 * (double)at / (double)size, size / 1e6);
    }
    if ((size_t)size > 2 * chunk) fprintf(stderr, "\n");
    if (count < 20) fatal("%s: only %zu tokens; need at least 20 for a train/val split", text_path, count);
    uint16_t *tokens = xmalloc(count * sizeof(uint16_t));
    for (size_t i = 0; i < count; i++) {
        if (ids[i] > UINT16_MAX) fatal("token id %d does not fit a uint16 shard", ids[i]);
        tokens[i] = (uint16_t)ids[i];
    }
    make_directories(out);
    check_text_is_no_output(text_path, out);
    size_t train = count - count / 10;
    char path[4096];
    snprintf(path, sizeof path, "%s/train.bin", out);
    token_shard_write(path, tokens, train);
    snprintf(path, sizeof path, "%s/val.bin", out);
    token_shard_write(path, tokens + train, count - train);
    data_dir_write_tokenizer(out, kind, tok.vocab_size);
    printf("%s: %ld bytes -> %zu %s tokens (vocab %d): %zu train, %zu val, in %s/\n", text_path, size,
           count, kind, tok.vocab_size, train, count - train, out);
    free(tokens);
    free(ids);
    free(text);
    tokenizer_free(&tok);
    return 0;
}
