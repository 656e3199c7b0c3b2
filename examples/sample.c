// sample: generates text from a trained model (any trainer's --out-model, or an
// llm.c checkpoint). Each new token runs the whole context through the model's
// forward again (no key/value cache): slow for long texts, but it is the same
// forward the trainers run. Once the text is longer than the model's maxT, the
// context is its last maxT tokens.
//   build/sample --model runs/x/model.bin --tokenizer byte --prompt "The " --tokens 200
//                [--temperature 0.8] [--seed 7] [--ids]
// Temperature 0 takes the most likely token each time; otherwise a token is drawn
// from softmax(logits / temperature) with a counter-based generator, so a seed
// gives the same text every time.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cli.h"
#include "device/device.h"
#include "util/errors.h"
#include "util/utf8.h"
#include "util/random.h"
#include "run/tokenizer.h"
#include "models/gpt2.h"
#include "models/gpt2_io.h"

// The next token from one position's logits (the first V of Vp): the largest at
// temperature 0 (the first of equal ones), else a draw from softmax(logits / temperature)
// with uniform number `index` of the seed's stream.
static int pick_token(const float *logits, int V, float temperature, uint64_t seed, uint64_t index) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature == 0) return best;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((logits[i] - logits[best]) / temperature);
    double target = random_uniform(seed, 0, index, 0) * sum, cumulative = 0;  // in (0, sum]
    for (int i = 0; i < V; i++) {
        cumulative += exp((logits[i] - logits[best]) / temperature);
        if (cumulative >= target) return i;
    }
    return best;  // rounding left the target just above the last sum
}

// Reads every tensor of the checkpoint into one flat buffer and points the model at it.
// A weight that is NaN or infinite makes every logit NaN: refused, naming it,
// rather than sampled into noise.
// The sampled text, written so that a terminal and a Markdown viewer show it: whole UTF-8 characters as they
// are, and a byte that begins none (a byte tokenizer's model samples any byte), or a control character other
// than a newline or a tab, as \xNN. A character's first bytes wait here for the rest (at most 3 of them).
typedef struct {
    unsigned char pending[4];
    int n;
} TextOut;

// The length of the UTF-8 character byte `lead` begins: 1 to 4, or 0 if it begins none.
static int utf8_length(unsigned char lead) {
    return lead < 0x80 ? 1 : lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3
           : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
}

static void text_out_escaped(unsigned char byte) {
    if (byte == '\n' || byte == '\t' || (byte >= 0x20 && byte < 0x7F)) putchar(byte);
    else printf("\\x%02X", byte);
}

// Appends `n` bytes; with `last`, writes out what still waits.
static void text_out(TextOut *o, const char *bytes, int n, int last) {
    for (int i = 0; i <= n; i++) {
        if (i < n) o->pending[o->n++] = (unsigned char)bytes[i];
        while (o->n > 0) {
            int want = utf8_length(o->pending[0]), have = 1;
            while (have < o->n && have < want && (o->pending[have] & 0xC0) == 0x80) have++;
            uint32_t cp;
            if (want > 1 && have == o->n && have < want && !(last && i == n)) break;  // its other bytes to come
            int used = want > 1 && have == want ? utf8_decode(o->pending, (size_t)have, &cp) : 1;
            if (want > 1 && have == want && cp != UTF8_INVALID) fwrite(o->pending, 1, (size_t)used, stdout);
            else text_out_escaped(o->pending[0]), used = 1;
            memmove(o->pending, o->pending + used, (size_t)(o->n - used));
            o->n -= used;
        }
    }
}

static float *load_params(GPT2 *model, const char *path) {
    const GPT2Layout *layout = &model->layout;
    float *flat = xmalloc(layout->num_params * sizeof(float));
    for (int t = 0; t < layout->num_tensors; t++) {
        const GPT2Tensor *tensor = &layout->tensors[t];
        gpt2_checkpoint_read_rows(path, layout, t, 0, tensor->rows, flat + tensor->offset);  // finite, or refused
    }
    gpt2_point_into_flat(layout, flat, model->params);
    return flat;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *tokenizer_kind = "byte", *vocab_dir = NULL, *prompt = NULL;
    int num_tokens = 64, print_ids = 0;
    float temperature = 1.0f;
    uint64_t seed = 1337;
    const CliOption options[] = {
        {"--model", "FILE.bin", CLI_STRING, &model_path, 0, 0, "an llm.c checkpoint (a trainer's --out-model)"},
        {"--tokenizer", "byte|gpt2", CLI_STRING, &tokenizer_kind, 0, 0, "the model's tokenizer (default byte)"},
        {"--vocab", "DIR", CLI_STRING, &vocab_dir, 0, 0, "encoder.json and vocab.bpe, for gpt2 (models/gpt2_vocab)"},
        {"--prompt", "TEXT", CLI_STRING, &prompt, 0, 0, "the text to continue (at least one token)"},
        {"--tokens", "N", CLI_INT, &num_tokens, 0, 1 << 20, "tokens to generate (default 64)"},
        {"--temperature", "T", CLI_FLOAT, &temperature, 0, 1000, "softmax temperature; 0: always the likeliest (default 1)"},
        {"--seed", "S", CLI_UINT64, &seed, 0, 4611686018427387904.0, "the draws' seed (default 1337)"},
        {"--ids", NULL, CLI_SWITCH, &print_ids, 0, 0, "print the generated token ids instead of the text"},
    };
    CliSpec spec = {.synopsis = "--model FILE.bin [--tokenizer byte|gpt2 [--vocab DIR]] --prompt TEXT [--tokens N] "
                                "[--temperature T] [--seed S] [--ids]",
                    .about = "generates text from a trained model",
                    .options = options, .num_options = sizeof options / sizeof options[0]};
    cli_parse_or_exit(&spec, argc, argv);
    if (!model_path || !prompt) fatal("--model FILE.bin and --prompt TEXT are required (%s --help)", argv[0]);
    Tokenizer tok;
    tokenizer_init(&tok, tokenizer_kind, vocab_dir);
    GPT2Config config;
    gpt2_checkpoint_read_config(model_path, &config);
    if (config.vocab_size != tok.vocab_size)
        fatal("--model %s: its vocabulary has V=%d tokens, the %s tokenizer %d", model_path, config.vocab_size,
              tokenizer_kind, tok.vocab_size);
    int *ids = NULL;
    size_t count = 0, capacity = 0;
    tokenizer_encode(&tok, prompt, strlen(prompt), &ids, &count, &capacity);
    if (count == 0) fatal("--prompt is empty: give at least one token to continue");
    if (count > (size_t)config.max_seq_len)
        fatal("--prompt is %zu tokens, more than the model's maximum sequence length %d", count, config.max_seq_len);
    int *text = xmalloc((count + (size_t)num_tokens) * sizeof(int));  // (prompt + generated)
    memcpy(text, ids, count * sizeof(int));
    free(ids);

    // one sequence as long as the text will get (up to maxT); positions past the
    // text hold token 0, which causal attention keeps from reaching the text's logits
    int window = (int)(count + (size_t)num_tokens < (size_t)config.max_seq_len ? count + (size_t)num_tokens
                                                                                 : (size_t)config.max_seq_len);
    MemAccount mem = {0};
    GPT2 model;
    gpt2_init(&model, config, 1, window, 0, ATTENTION_KEEPS_PROBABILITIES, CLASSIFIER_KEEPS_PROBABILITIES, &mem);
    float *flat = load_params(&model, model_path);
    int *inputs = xcalloc((size_t)window, sizeof(int));
    float *logits = xmalloc((size_t)config.padded_vocab_size * sizeof(float));
    TextOut out = {.n = 0};
    if (!print_ids) {
        text_out(&out, prompt, (int)strlen(prompt), 0);
        fflush(stdout);
    }
    for (int k = 0; k < num_tokens; k++) {
        size_t context = count < (size_t)window ? count : (size_t)window;
        for (size_t i = 0; i < context; i++) inputs[i] = text[count - context + i];
        gpt2_set_batch(&model, inputs, NULL);
        for (int u = 0; u < model.layout.num_units; u++) gpt2_forward_unit(&model, u);
        device_to_host(logits, model.acts.logits + (context - 1) * (size_t)config.padded_vocab_size,
                       (size_t)config.padded_vocab_size);
        int next = pick_token(logits, config.vocab_size, temperature, seed, (uint64_t)k);
        text[count++] = next;
        char bytes[256];
        int n = tokenizer_decode(&tok, next, bytes, sizeof bytes);
        if (n < 0) fatal("token %d has no text in the %s tokenizer", next, tokenizer_kind);
        if (print_ids) printf("%s%d", k ? " " : "", next);
        else text_out(&out, bytes, n, 0);
        fflush(stdout);
    }
    if (!print_ids) text_out(&out, NULL, 0, 1);
    printf("\n");
    if (ferror(stdout)) fatal("standard output: write failed");
    free(logits);
    free(inputs);
    free(flat);
    free(text);
    gpt2_free(&model, &mem);
    tokenizer_free(&tok);
    return 0;
}
