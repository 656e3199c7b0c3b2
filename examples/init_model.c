// init_model: writes a freshly initialized GPT-2 of any shape as an llm.c
// checkpoint (useful for odd sizes that no preset has).
//   build/init_model --layers 2 --heads 2 --channels 38 --vocab 101 --max-seq 37 --out FILE.bin
//   (--seed S, default 1337)
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/errors.h"
#include "../models/gpt2.h"
#include "../models/gpt2_io.h"

static int parse_int(const char *flag, const char *text) {
    errno = 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v <= 0 || v > 1 << 24) fatal("%s: '%s' is not a positive integer", flag, text);
    return (int)v;
}

int main(int argc, char **argv) {
    GPT2Config c = {0};
    long seed = 1337;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc) fatal("%s needs a value", argv[i]);
        const char *flag = argv[i], *value = argv[++i];
        if (strcmp(flag, "--layers") == 0) c.num_layers = parse_int(flag, value);
        else if (strcmp(flag, "--heads") == 0) c.num_heads = parse_int(flag, value);
        else if (strcmp(flag, "--channels") == 0) c.channels = parse_int(flag, value);
        else if (strcmp(flag, "--vocab") == 0) c.vocab_size = parse_int(flag, value);
        else if (strcmp(flag, "--max-seq") == 0) c.max_seq_len = parse_int(flag, value);
        else if (strcmp(flag, "--seed") == 0) seed = parse_int(flag, value);
        else if (strcmp(flag, "--out") == 0) out = value;
        else fatal("unknown flag '%s'", flag);
    }
    if (!out || !c.num_layers || !c.num_heads || !c.channels || !c.vocab_size || !c.max_seq_len)
        fatal("usage: init_model --layers L --heads NH --channels C --vocab V --max-seq T [--seed S] --out FILE.bin");
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
    gpt2_config_validate(&c, "init_model");
    GPT2Layout layout;
    gpt2_layout_init(&layout, c);
    float *flat = xmalloc(layout.num_params * sizeof(float));
    for (int t = 0; t < layout.num_tensors; t++)
        gpt2_init_rows(&layout, t, (uint64_t)seed, 0, layout.tensors[t].rows, flat + layout.tensors[t].offset);
    gpt2_checkpoint_write(out, &c, flat, layout.num_params);
    free(flat);
    gpt2_layout_free(&layout);
    return 0;
}
