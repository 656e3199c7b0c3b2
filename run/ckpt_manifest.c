#include "run/ckpt_manifest.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/crc32.h"

#define MANIFEST_MAGIC "shardlab-checkpoint 1"

static int set_error(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

// Reads the next unsigned integer field of the current line.
static int next_u64(const char **p, uint64_t *value) {
    while (**p == ' ') (*p)++;
    if (**p < '0' || **p > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(*p, &end, 10);
    if (errno) return -1;
    *p = end;
    *value = v;
    return 0;
}

// A decay in (0, 1), as --ema takes it.
static int next_decay(const char **p, float *value) {
    while (**p == ' ') (*p)++;
    if (**p < '0' || **p > '9') return 0;
    char *end;
    errno = 0;
    double v = strtod(*p, &end);
    if (errno || !(v > 0 && v < 1) || !((float)v > 0 && (float)v < 1)) return 0;  // in (0, 1) as a float too
    *p = end;
    *value = (float)v;
    return 1;
}

DecayText ckpt_decay_text(float decay) {
    DecayText d;
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(d.text, sizeof d.text, "%.*g", digits, decay);
        if ((float)strtod(d.text, NULL) == decay) break;
    }
    return d;
}

// What a field's line must hold, for its error.
static const char *field_form(const char *word) {
    static const char *const forms[][2] = {
        {"strategy", "'strategy NAME'"}, {"world_size", "'world_size N', N from 1 to 2^20"},
        {"step", "'step N', N from 0 to 2^30"}, {"data_position", "'data_position TOKENS'"}, {"seed", "'seed N'"},
        {"ema", "'ema DECAY', once and before the pieces, DECAY in (0, 1) as a float"},
        {"precision", "'precision fp32' or 'precision bf16', once"},
        {"config", "'config MAX_SEQ_LEN VOCAB LAYERS HEADS CHANNELS PADDED_VOCAB', each at least 1, VOCAB at most "
                   "65536 and PADDED_VOCAB, HEADS dividing CHANNELS (a model build/init_model makes)"},
        {"files", "'files N', once"}, {"file", "'file INDEX NAME BYTES', the indexes in order, after 'files'"},
        {"pieces", "'pieces N', once"}, {"piece", "'piece TENSOR ROW ROWS' and per part FILE OFFSET CRC, then STEP"}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        if (strcmp(word, forms[i][0]) == 0) return forms[i][1];
    return "";
}

static int next_int(const char **p, int *value, int max) {
    uint64_t v;
    if (next_u64(p, &v) != 0 || v > (uint64_t)max) return -1;
    *value = (int)v;
    return 0;
}

static int next_word(const char **p, char *out, size_t size) {
    while (**p == ' ') (*p)++;
    size_t n = 0;
    while (**p && **p != ' ' && **p != '\n') {
        if (n + 1 >= size) return -1;
        out[n++] = *(*p)++;
    }
    out[n] = '\0';
    return n ? 0 : -1;
}

int ckpt_valid_file_name(const char *name) {
    if (!*name || name[0] == '.') return 0;
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == '.')) return 0;
    return 1;
}

int ckpt_manifest_parse(const char *text, size_t len, CkptManifest *m, char *err, size_t err_len) {
    memset(m, 0, sizeof *m);
    // the last line, "end CRC", covers every byte before it
    const char *end_line = NULL;
    for (size_t i = len; i-- > 0;)
        if (i + 4 <= len && memcmp(text + i, "end ", 4) == 0 && (i == 0 || text[i - 1] == '\n')) { end_line = text + i; break; }
    if (!end_line) return set_error(err, err_len, "no final 'end' line (truncated?)");
    char *copy = malloc(len + 1);
    if (!copy) return set_error(err, err_len, "out of memory");
    memcpy(copy, text, len);
    copy[len] = '\0';
    const char *p = copy + (end_line - text) + 4;
    uint64_t want_crc;
    if (next_u64(&p, &want_crc) != 0) { free(copy); return set_error(err, err_len, "bad 'end' line"); }
    uint32_t crc = crc32_update(0, text, (size_t)(end_line - text));
    if (crc != want_crc) { free(copy); return set_error(err, err_len, "checksum mismatch (the manifest is corrupted)"); }

    int status = -1, files_seen = 0, pieces_seen = 0;
    char word[32];
    const char *line = copy;
    const char *stop = copy + (end_line - text);
    if (strncmp(line, MANIFEST_MAGIC "\n", strlen(MANIFEST_MAGIC) + 1) != 0) {
        set_error(err, err_len, "not a shardlab checkpoint manifest");
        goto done;
    }
    for (line = strchr(line, '\n') + 1; line < stop; line = strchr(line, '\n') + 1) {
        p = line;
        if (next_word(&p, word, sizeof word) != 0) { set_error(err, err_len, "empty line"); goto done; }
        GPT2Config *c = &m->config;
        int ok = 0;
        if (strcmp(word, "strategy") == 0) ok = next_word(&p, m->strategy, sizeof m->strategy) == 0;
        else if (strcmp(word, "world_size") == 0) ok = next_int(&p, &m->world_size, 1 << 20) == 0 && m->world_size > 0;
        else if (strcmp(word, "step") == 0) ok = next_int(&p, &m->step, 1 << 30) == 0;
        else if (strcmp(word, "data_position") == 0) ok = next_u64(&p, &m->data_position) == 0;
        else if (strcmp(word, "seed") == 0) ok = next_u64(&p, &m->seed) == 0;
        else if (strcmp(word, "ema") == 0) ok = !m->pieces && m->ema_decay == 0 && next_decay(&p, &m->ema_decay);
        else if (strcmp(word, "precision") == 0)
            ok = !m->precision[0] && next_word(&p, m->precision, sizeof m->precision) == 0 &&
                 (strcmp(m->precision, "fp32") == 0 || strcmp(m->precision, "bf16") == 0);
        else if (strcmp(word, "config") == 0)
            ok = next_int(&p, &c->max_seq_len, 1 << 24) == 0 && next_int(&p, &c->vocab_size, 65536) == 0 &&
                 next_int(&p, &c->num_layers, 1 << 16) == 0 && next_int(&p, &c->num_heads, 1 << 16) == 0 &&
                 next_int(&p, &c->channels, 1 << 20) == 0 && next_int(&p, &c->padded_vocab_size, 1 << 24) == 0 &&
                 c->max_seq_len > 0 && c->vocab_size > 0 && c->num_layers > 0 && c->num_heads > 0 && c->channels > 0 &&
                 c->channels % c->num_heads == 0 && c->padded_vocab_size >= c->vocab_size;
        else if (strcmp(word, "files") == 0) {
            ok = !m->files && next_int(&p, &m->num_files, 1 << 20) == 0;
            if (ok) {
                m->files = calloc((size_t)m->num_files + 1, sizeof *m->files);
                m->file_sizes = calloc((size_t)m->num_files + 1, sizeof *m->file_sizes);
                ok = m->files && m->file_sizes;
            }
        } else if (strcmp(word, "file") == 0) {
            int index;
            ok = m->files && next_int(&p, &index, 1 << 20) == 0 && index == files_seen && index < m->num_files &&
                 next_word(&p, m->files[index], CKPT_MAX_PATH) == 0 && ckpt_valid_file_name(m->files[index]) &&
                 next_u64(&p, &m->file_sizes[index]) == 0;
            files_seen += ok;
        } else if (strcmp(word, "pieces") == 0) {
            ok = !m->pieces && next_int(&p, &m->num_pieces, 1 << 24) == 0;
            if (ok) ok = (m->pieces = calloc((size_t)m->num_pieces + 1, sizeof *m->pieces)) != NULL;
        } else if (strcmp(word, "piece") == 0) {
            ok = m->pieces && pieces_seen < m->num_pieces;
            CkptPiece *q = ok ? &m->pieces[pieces_seen] : NULL;
            ok = ok && next_int(&p, &q->tensor, 1 << 24) == 0 && next_int(&p, &q->row_begin, 1 << 30) == 0 &&
                 next_int(&p, &q->row_count, 1 << 30) == 0;
            for (int k = 0; ok && k < ckpt_parts(m); k++) {
                uint64_t crc_value;
                ok = next_int(&p, &q->file[k], 1 << 20) == 0 && q->file[k] < m->num_files &&
                     next_u64(&p, &q->offset[k]) == 0 && next_u64(&p, &crc_value) == 0 && crc_value <= UINT32_MAX;
                if (ok) q->crc[k] = (uint32_t)crc_value;
            }
            ok = ok && next_int(&p, &q->adam_step, 1 << 30) == 0;
            while (ok && *p == ' ') p++;
            if ((!ok || *p != '\n') && q) {  // the commonest cause, named
                set_error(err, err_len, "malformed 'piece' line %d (each piece lists %d parts: params, m, v%s)",
                          pieces_seen, ckpt_parts(m), m->ema_decay > 0 ? " and the EMA, as the 'ema' line says"
                                                                        : "; with an EMA a fourth, and an 'ema' line "
                                                                          "before the pieces");
                goto done;
            }
            pieces_seen += ok;
        } else {
            set_error(err, err_len, "unknown field '%s'", word);
            goto done;
        }
        while (*p == ' ') p++;
        if (!ok || *p != '\n') {
            set_error(err, err_len, "malformed '%s' line: %s", word, field_form(word));
            goto done;
        }
    }
    if (!m->strategy[0] || !m->world_size || !m->config.channels || !m->files || !m->pieces) {
        set_error(err, err_len, "a required field is missing");
        goto done;
    }
    if (files_seen != m->num_files || pieces_seen != m->num_pieces) {
        set_error(err, err_len, "%d of %d files and %d of %d pieces listed", files_seen, m->num_files, pieces_seen,
                  m->num_pieces);
        goto done;
    }
    status = 0;
done:
    free(copy);
    if (status != 0) ckpt_manifest_free(m);
    return status;
}

void ckpt_manifest_free(CkptManifest *m) {
    free(m->files);
    free(m->file_sizes);
    free(m->pieces);
    memset(m, 0, sizeof *m);
}

char *ckpt_manifest_text(const CkptManifest *m, size_t *len) {
    size_t cap = 4096 + 64 * (size_t)m->num_files + 200 * (size_t)m->num_pieces, n = 0;
    char *text = malloc(cap);
    if (!text) return NULL;
    const GPT2Config *c = &m->config;
    n += (size_t)snprintf(text + n, cap - n,
                          MANIFEST_MAGIC "\nstrategy %s\nworld_size %d\nstep %d\ndata_position %" PRIu64
                                         "\nseed %" PRIu64 "\nconfig %d %d %d %d %d %d\n",
                          m->strategy, m->world_size, m->step, m->data_position, m->seed, c->max_seq_len,
                          c->vocab_size, c->num_layers, c->num_heads, c->channels, c->padded_vocab_size);
    if (m->ema_decay > 0) n += (size_t)snprintf(text + n, cap - n, "ema %s\n", ckpt_decay_text(m->ema_decay).text);  // before the pieces
    if (m->precision[0]) n += (size_t)snprintf(text + n, cap - n, "precision %s\n", m->precision);
    n += (size_t)snprintf(text + n, cap - n, "files %d\n", m->num_files);
    for (int f = 0; f < m->num_files; f++)
        n += (size_t)snprintf(text + n, cap - n, "file %d %s %" PRIu64 "\n", f, m->files[f], m->file_sizes[f]);
    n += (size_t)snprintf(text + n, cap - n, "pieces %d\n", m->num_pieces);
    for (int i = 0; i < m->num_pieces; i++) {
        const CkptPiece *q = &m->pieces[i];
        n += (size_t)snprintf(text + n, cap - n, "piece %d %d %d", q->tensor, q->row_begin, q->row_count);
        for (int k = 0; k < ckpt_parts(m); k++)
            n += (size_t)snprintf(text + n, cap - n, " %d %" PRIu64 " %u", q->file[k], q->offset[k], q->crc[k]);
        n += (size_t)snprintf(text + n, cap - n, " %d\n", q->adam_step);
    }
    n += (size_t)snprintf(text + n, cap - n, "end %u\n", crc32_update(0, text, n));
    *len = n;
    return text;
}

