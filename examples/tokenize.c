// tokenize: prints the token ids of a text, space-separated on one line.
//   build/tokenize --tokenizer gpt2 --vocab DIR [FILE]     (standard input by default)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../common/tokenizer.h"

int main(int argc, char **argv) {
    const char *kind = NULL, *vocab = NULL, *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokenizer") == 0 && i + 1 < argc) kind = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && i + 1 < argc) vocab = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] != '\0') fatal("unknown or incomplete flag '%s' (usage: tokenize --tokenizer byte|gpt2 [--vocab DIR] [FILE])", argv[i]);
        else if (!path) path = argv[i];
        else fatal("more than one input file ('%s', '%s')", path, argv[i]);
    }
    if (!kind) fatal("--tokenizer byte|gpt2 is required");
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
