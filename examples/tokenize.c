// tokenize: prints the token ids of a text, space-separated on one line.
//   build/tokenize --tokenizer gpt2 --vocab DIR [FILE]     (standard input by default, or FILE "-")
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "util/errors.h"
#include "run/tokenizer.h"

int main(int argc, char **argv) {
    const char *kind = NULL, *vocab = NULL, *path = NULL;
    int num_paths = 0;
    const CliOption options[] = {
        {"--tokenizer", "byte|gpt2", CLI_STRING, &kind, 0, 0, "byte: V = 256; gpt2: GPT-2's BPE (V = 50257)"},
        {"--vocab", "DIR", CLI_STRING, &vocab, 0, 0, "gpt2 only: DIR/encoder.json and DIR/vocab.bpe"},
    };
    CliSpec spec = {.synopsis = "--tokenizer byte|gpt2 [--vocab DIR] [FILE]",
                    .about = "prints the token ids of FILE (a regular file; default: standard input), space-separated",
                    .options = options, .num_options = sizeof options / sizeof options[0],
                    .positional = &path, .max_positional = 1, .num_positional = &num_paths};
    cli_parse_or_exit(&spec, argc, argv);
    if (!kind) fatal("--tokenizer byte|gpt2 is required (%s --help)", argv[0]);
    if (path && strcmp(path, "-") == 0) path = NULL;
    Tokenizer tok;
    tokenizer_init(&tok, kind, vocab);
    FILE *f = path ? xfopen(path, "rb") : stdin;
    size_t len = 0, cap = 4096;
    char *text = xmalloc(cap);
    for (size_t got; (got = fread(text + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            cap *= 2;
            char *grown = realloc(text, cap);
            if (!grown) fatal("out of memory reading %s", path ? path : "standard input");
            text = grown;
        }
    }
    if (ferror(f)) fatal("%s: read error", path ? path : "standard input");
    if (path) fclose(f);
    int *ids = NULL;
    size_t count = 0, capacity = 0;
    tokenizer_encode(&tok, text, len, &ids, &count, &capacity);
    for (size_t i = 0; i < count; i++) printf(i ? " %d" : "%d", ids[i]);
    printf("\n");
    free(ids);
    free(text);
    tokenizer_free(&tok);
    return 0;
}
