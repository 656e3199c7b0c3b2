// init_model: writes a freshly initialized GPT-2 of any shape as an llm.c
// checkpoint (useful for odd sizes that no preset has).
//   build/init_model --layers 2 --heads 2 --channels 38 --vocab 101 --max-seq 37 --out FILE.bin
//   (--seed S, default 1337)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/cli.h"
#include "util/errors.h"
#include "models/gpt2.h"
#include "models/gpt2_io.h"

int main(int argc, char **argv) {
    GPT2Config c = {0};
    uint64_t seed = 1337;
    const char *out = NULL;
    const CliOption options[] = {
        {"--layers", "L", CLI_INT, &c.num_layers, 1, 1 << 24, "transformer blocks"},
        {"--heads", "NH", CLI_INT, &c.num_heads, 1, 1 << 24, "attention heads (must divide C)"},
        {"--channels", "C", CLI_INT, &c.channels, 1, 1 << 24, "embedding width"},
        {"--vocab", "V", CLI_INT, &c.vocab_size, 1, 65536,
         "vocabulary (at most 65536: token shards hold uint16 ids); padded to a multiple of 128"},
        {"--max-seq", "T", CLI_INT, &c.max_seq_len, 1, 1 << 24, "longest sequence (rows of wpe)"},
        {"--seed", "S", CLI_UINT64, &seed, 0, 4611686018427387904.0, "initialization seed (default 1337, as the trainers)"},
        {"--out", "FILE.bin", CLI_STRING, &out, 0, 0, "where the llm.c checkpoint goes"},
    };
    CliSpec spec = {.synopsis = "--layers L --heads NH --channels C --vocab V --max-seq T [--seed S] --out FILE.bin",
                    .about = "writes a freshly initialized GPT-2 of any shape as an llm.c checkpoint",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    if (!out || !c.num_layers || !c.num_heads || !c.channels || !c.vocab_size || !c.max_seq_len)
        fatal("--layers, --heads, --channels, --vocab, --max-seq and --out are required (%s --help)", argv[0]);
    c.padded_vocab_size = (c.vocab_size + 127) / 128 * 128;
    gpt2_config_validate(&c, "init_model");
    char what[128];
    size_t table = gpt2_layout_table_bytes(&c), params = gpt2_config_num_params(&c) * sizeof(float);
    snprintf(what, sizeof what, "init_model: this model (%.3f GB of parameters, a %.3f GB tensor table)", params / 1e9,
             table / 1e9);
    mem_require_host(table + params, what);
    int show_progress = table + params > 1000000000;  // seconds of work: say what is going on
    if (show_progress) fprintf(stderr, "%s: building the layout\n", what);
    GPT2Layout layout;
    gpt2_layout_init(&layout, c);
    float *flat = xmalloc(layout.num_params * sizeof(float));
    for (int t = 0; t < layout.num_tensors; t++) {
        gpt2_init_rows(&layout, t, seed, 0, layout.tensors[t].rows, flat + layout.tensors[t].offset);
        if (show_progress && (t + 1) % (1 << 20) == 0)
            fprintf(stderr, "\rinit_model: %3.0f%% of %d tensors initialized", 100.0 * (t + 1) / layout.num_tensors,
                    layout.num_tensors);
    }
    if (show_progress) fprintf(stderr, "\ninit_model: writing %s\n", out);
    gpt2_checkpoint_write(out, &c, flat, layout.num_params);
    free(flat);
    gpt2_layout_free(&layout);
    return 0;
}
