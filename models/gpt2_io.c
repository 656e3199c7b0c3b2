#include "models/gpt2_io.h"

#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

static void read_header(FILE *f, const char *path, int32_t header[LLMC_HEADER_INTS]) {
    if (fread(header, sizeof(int32_t), LLMC_HEADER_INTS, f) != LLMC_HEADER_INTS)
        fatal("%s: truncated file: shorter than the %d-byte header", path,
              (int)(LLMC_HEADER_INTS * sizeof(int32_t)));
}

void gpt2_checkpoint_read_config(const char *path, GPT2Config *config) {
    FILE *f = xfopen(path, "rb");
    int32_t header[LLMC_HEADER_INTS];
    read_header(f, path, header);
    if (header[0] != GPT2_CHECKPOINT_MAGIC)
        fatal("%s: not a GPT-2 checkpoint (magic %d, expected %d)", path, header[0],
              GPT2_CHECKPOINT_MAGIC);
    if (header[1] != GPT2_CHECKPOINT_VERSION_FP32)
        fatal("%s: unsupported checkpoint version %d (only %d, fp32, is supported)", path,
              header[1], GPT2_CHECKPOINT_VERSION_FP32);
    config->max_seq_len = header[2];
    config->vocab_size = header[3];
    config->num_layers = header[4];
    config->num_heads = header[5];
    config->channels = header[6];
    config->padded_vocab_size = header[7];
    gpt2_config_validate(config, path);
    long expected = (long)(LLMC_HEADER_INTS * sizeof(int32_t) + gpt2_config_num_params(config) * sizeof(float));
    long actual = xfsize(f, path);
    fclose(f);
    char gb[32] = "";
    if (expected >= 1000000000L) snprintf(gb, sizeof gb, " (%.3f GB)", expected / 1e9);
    if (actual != expected)
        fatal("%s: header/size mismatch: the header's config needs %ld bytes%s, the file has %ld%s",
              path, expected, gb, actual, actual < expected ? " (truncated)" : "");
}

void gpt2_checkpoint_read_rows(const char *path, const GPT2Layout *layout, int t, int row_begin,
                               int row_count, float *out) {
    const GPT2Tensor *tensor = &layout->tensors[t];
    CHECK(row_begin >= 0 && row_begin + row_count <= tensor->rows, "rows out of range of %s",
          tensor->name);
    FILE *f = xfopen(path, "rb");
    long offset = (long)(LLMC_HEADER_INTS * sizeof(int32_t) +
                         (tensor->offset + (size_t)row_begin * tensor->cols) * sizeof(float));
    if (fseek(f, offset, SEEK_SET) != 0) fatal("%s: cannot seek to %s", path, tensor->name);
    xfread(out, sizeof(float), (size_t)row_count * tensor->cols, f, path);
    fclose(f);
    for (size_t i = 0; i < (size_t)row_count * tensor->cols; i++)  // a NaN trains into a NaN loss, far from here
        if (!isfinite(out[i]))
            fatal("%s: %s[%zu] is %s: the model holds weights that are not finite", path, tensor->name,
                  (size_t)row_begin * tensor->cols + i, isnan(out[i]) ? "nan" : "inf");
}

static void fill_checkpoint_header(int32_t header[LLMC_HEADER_INTS], const GPT2Config *c) {
    memset(header, 0, LLMC_HEADER_INTS * sizeof(int32_t));
    header[0] = GPT2_CHECKPOINT_MAGIC;
    header[1] = GPT2_CHECKPOINT_VERSION_FP32;
    header[2] = c->max_seq_len;
    header[3] = c->vocab_size;
    header[4] = c->num_layers;
    header[5] = c->num_heads;
    header[6] = c->channels;
    header[7] = c->padded_vocab_size;
}

void gpt2_checkpoint_write(const char *path, const GPT2Config *config, const float *flat_params,
                           size_t num_params) {
    int32_t header[LLMC_HEADER_INTS];
    fill_checkpoint_header(header, config);
    char tmp[4200];  // a failed write leaves the old file whole (it may be the --model being trained)
    FILE *f = replace_begin(path, tmp, sizeof tmp);
    xfwrite(header, sizeof(int32_t), LLMC_HEADER_INTS, f, tmp);
    xfwrite(flat_params, sizeof(float), num_params, f, tmp);
    replace_commit(f, tmp, path);
}

void gpt2_debug_state_read(const char *path, const GPT2Layout *layout, GPT2DebugState *state) {
    FILE *f = xfopen(path, "rb");
    int32_t header[LLMC_HEADER_INTS];
    read_header(f, path, header);
    if (header[0] != GPT2_DEBUG_STATE_MAGIC)
        fatal("%s: not a debug state file (magic %d, expected %d)", path, header[0],
              GPT2_DEBUG_STATE_MAGIC);
    if (header[1] != 2)
        fatal("%s: unsupported debug state version %d (expected 2)", path, header[1]);
    int B = header[2], T = header[3];
    if (B <= 0 || T <= 0 || T > layout->config.max_seq_len)
        fatal("%s: bad batch shape B=%d T=%d (maxT=%d)", path, B, T, layout->config.max_seq_len);
    size_t BT = (size_t)B * T, V = (size_t)layout->config.vocab_size;
    long expected = (long)(LLMC_HEADER_INTS * sizeof(int32_t) + 2 * BT * sizeof(int32_t) +
                           (BT * V + 1 + layout->num_params) * sizeof(float));
    long actual = xfsize(f, path);
    if (actual != expected)
        fatal("%s: header/size mismatch: B=%d T=%d and the model need %ld bytes, the file has %ld",
              path, B, T, expected, actual);
    state->B = B;
    state->T = T;
    state->inputs = xmalloc(BT * sizeof(int));
    state->targets = xmalloc(BT * sizeof(int));
    state->logits = xmalloc(BT * V * sizeof(float));
    state->grads = xmalloc(layout->num_params * sizeof(float));
    xfread(state->inputs, sizeof(int), BT, f, path);
    xfread(state->targets, sizeof(int), BT, f, path);
    xfread(state->logits, sizeof(float), BT * V, f, path);
    xfread(&state->loss, sizeof(float), 1, f, path);
    xfread(state->grads, sizeof(float), layout->num_params, f, path);
    fclose(f);
    for (size_t i = 0; i < BT; i++)
        if (state->inputs[i] < 0 || state->inputs[i] >= (int)V || state->targets[i] < 0 ||
            state->targets[i] >= (int)V)
            fatal("%s: token id at position %zu is outside the vocab [0, %zu)", path, i, V);
}

void gpt2_debug_state_write(const char *path, const GPT2Layout *layout, const GPT2DebugState *s) {
    int32_t header[LLMC_HEADER_INTS] = {GPT2_DEBUG_STATE_MAGIC, 2, s->B, s->T};
    size_t BT = (size_t)s->B * s->T;
    FILE *f = xfopen(path, "wb");
    xfwrite(header, sizeof(int32_t), LLMC_HEADER_INTS, f, path);
    xfwrite(s->inputs, sizeof(int), BT, f, path);
    xfwrite(s->targets, sizeof(int), BT, f, path);
    xfwrite(s->logits, sizeof(float), BT * layout->config.vocab_size, f, path);
    xfwrite(&s->loss, sizeof(float), 1, f, path);
    xfwrite(s->grads, sizeof(float), layout->num_params, f, path);
    xfclose(f, path);
}

void gpt2_debug_state_free(GPT2DebugState *state) {
    free(state->inputs);
    free(state->targets);
    free(state->logits);
    free(state->grads);
    memset(state, 0, sizeof *state);
}

void param_source_rows(const ParamSource *src, const GPT2Layout *layout, int t, int row_begin, int row_count,
                       float *out) {
    if (src->dry) return;
    if (src->checkpoint_path)
        gpt2_checkpoint_read_rows(src->checkpoint_path, layout, t, row_begin, row_count, out);
    else
        gpt2_init_rows(layout, t, src->seed, row_begin, row_count, out);
}
