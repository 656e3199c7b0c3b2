#include "run/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"
#include "util/json.h"
#include "util/unicode_tables.h"
#include "util/utf8.h"

static int in_ranges(uint32_t cp, const uint32_t (*ranges)[2], size_t count) {
    size_t lo = 0, hi = count;
    while (lo < hi) {  // binary search for the range containing cp
        size_t mid = (lo + hi) / 2;
        if (cp < ranges[mid][0]) hi = mid;
        else if (cp > ranges[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))
static int is_letter(uint32_t cp) { return in_ranges(cp, unicode_letter_ranges, COUNT_OF(unicode_letter_ranges)); }
static int is_number(uint32_t cp) { return in_ranges(cp, unicode_number_ranges, COUNT_OF(unicode_number_ranges)); }
static int is_space(uint32_t cp) {  // Unicode White_Space
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
           cp == 0x205F || cp == 0x3000;
}
static int is_other(uint32_t cp) { return !is_space(cp) && !is_letter(cp) && !is_number(cp); }

// Code point at byte offset i (invalid bytes count as "other" characters).
static uint32_t cp_at(const char *text, size_t len, size_t i, int *bytes) {
    uint32_t cp;
    *bytes = utf8_decode((const unsigned char *)text + i, len - i, &cp);
    return cp;
}

// Length of the run of characters from i for which pred holds.
static size_t run_length(const char *text, size_t len, size_t i, int (*pred)(uint32_t)) {
    size_t j = i;
    while (j < len) {
        int n;
        uint32_t cp = cp_at(text, len, j, &n);
        if (!pred(cp)) break;
        j += (size_t)n;
    }
    return j - i;
}

static int is_other_or_invalid(uint32_t cp) { return cp == UTF8_INVALID || is_other(cp); }

size_t gpt2_pretokenize_next(const char *text, size_t len) {
    // 's 't 're 've 'm 'll 'd
    if (text[0] == '\'' && len >= 2) {
        static const char *const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
        for (size_t k = 0; k < COUNT_OF(suffixes); k++) {
            size_t n = strlen(suffixes[k]);
            if (len >= 1 + n && memcmp(text + 1, suffixes[k], n) == 0) return 1 + n;
        }
    }
    // ' ?\p{L}+' then ' ?\p{N}+' then ' ?[^\s\p{L}\p{N}]+'
    size_t start = (text[0] == ' ' && len > 1) ? 1 : 0;
    int (*classes[])(uint32_t) = {is_letter, is_number, is_other_or_invalid};
    for (size_t k = 0; k < COUNT_OF(classes); k++) {
        size_t run = run_length(text, len, start, classes[k]);
        if (run > 0) return start + run;
    }
    // '\s+(?!\S)' then '\s+': a whitespace run gives up its last character to the
    // next piece when a non-space follows, unless it is only one character long.
    size_t run = run_length(text, len, 0, is_space);
    if (run == 0) {  // a lone character none of the classes took (cannot happen; be safe)
        int n;
        cp_at(text, len, 0, &n);
        return (size_t)n;
    }
    if (run == len) return run;
    int last_bytes = 1;
    for (size_t i = 0; i < run;) {  // byte length of the run's last character
        cp_at(text, len, i, &last_bytes);
        i += (size_t)last_bytes;
    }
    return run - (size_t)last_bytes > 0 ? run - (size_t)last_bytes : run;
}

// GPT-2 shows each byte as a printable character: printable Latin-1 bytes as
// themselves, the rest as code points 256, 257, ... in byte order.
static void init_byte_to_char(Tokenizer *tok) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : next++;
        tok->byte_to_char_len[b] = utf8_encode(cp, tok->byte_to_char[b]);
    }
}

static void load_encoder(Tokenizer *tok, const char *path) {
    size_t len;
    char *text = xread_file(path, &len);
    JsonCursor cur = {text, text + len};
    strmap_init(&tok->encoder, 60000);
    int max_id = -1;
    if (json_expect(&cur, '{') != 0) fatal("%s: not a JSON object", path);
    while (json_peek(&cur) != '}') {
        char *key;
        size_t key_len;
        long id;
        if (json_read_string(&cur, &key, &key_len) != 0 || json_expect(&cur, ':') != 0 ||
            json_read_int(&cur, &id) != 0)
            fatal("%s: malformed entry near byte %ld", path, (long)(cur.pos - text));
        if (id < 0 || id > 1000000) fatal("%s: token id %ld out of range", path, id);
        strmap_put(&tok->encoder, key, key_len, (int)id);
        if (id > max_id) max_id = (int)id;
        free(key);
        if (json_peek(&cur) == ',') json_expect(&cur, ',');
        else if (json_peek(&cur) != '}') fatal("%s: expected ',' or '}' near byte %ld", path, (long)(cur.pos - text));
    }
    if (tok->encoder.count == 0) fatal("%s: empty vocabulary", path);
    tok->vocab_size = max_id + 1;
    free(text);
}

static void load_merges(Tokenizer *tok, const char *path) {
    size_t len;
    char *text = xread_file(path, &len);
    strmap_init(&tok->merge_ranks, 60000);
    int rank = 0;
    char *line = text;
    if (strncmp(line, "#version", 8) != 0) fatal("%s: missing '#version' header line", path);
    for (char *next; line < text + len; line = next) {
        char *eol = memchr(line, '\n', (size_t)(text + len - line));
        next = eol ? eol + 1 : text + len;
        size_t line_len = (size_t)((eol ? eol : text + len) - line);
        if (line_len > 0 && line[line_len - 1] == '\r') line_len--;
        if (line_len == 0 || line[0] == '#') continue;
        if (!memchr(line, ' ', line_len)) fatal("%s: merge line %d has no space", path, rank + 2);
        strmap_put(&tok->merge_ranks, line, line_len, rank++);
    }
    free(text);
}

void tokenizer_init(Tokenizer *tok, const char *kind, const char *vocab_dir) {
    memset(tok, 0, sizeof *tok);
    if (strcmp(kind, "byte") == 0) {
        if (vocab_dir) fatal("--vocab %s goes with --tokenizer gpt2; the byte tokenizer has no vocab files", vocab_dir);
        tok->kind = TOKENIZER_BYTE;
        tok->vocab_size = 256;
        return;
    }
    if (strcmp(kind, "gpt2") != 0) fatal("--tokenizer: unknown tokenizer '%s' (use byte or gpt2)", kind);
    if (!vocab_dir) fatal("--tokenizer gpt2 needs --vocab DIR (with encoder.json and vocab.bpe)");
    tok->kind = TOKENIZER_GPT2;
    char path[4096];
    xsnprintf(path, sizeof path, "%s/encoder.json", vocab_dir);
    load_encoder(tok, path);
    tok->encoder_path = xmalloc(strlen(path) + 1);
    strcpy(tok->encoder_path, path);
    xsnprintf(path, sizeof path, "%s/vocab.bpe", vocab_dir);
    load_merges(tok, path);
    init_byte_to_char(tok);
    tok->id_to_token = xcalloc((size_t)tok->vocab_size, sizeof(const char *));
    tok->id_to_token_len = xcalloc((size_t)tok->vocab_size, sizeof(size_t));
    for (size_t slot = 0; slot < tok->encoder.capacity; slot++) {
        if (!tok->encoder.keys[slot]) continue;
        tok->id_to_token[tok->encoder.values[slot]] = tok->encoder.keys[slot];
        tok->id_to_token_len[tok->encoder.values[slot]] = tok->encoder.lens[slot];
    }
}

int tokenizer_decode(const Tokenizer *tok, int id, char *out, size_t capacity) {
    if (id < 0 || id >= tok->vocab_size || capacity == 0) return -1;
    if (tok->kind == TOKENIZER_BYTE) {
        out[0] = (char)id;
        return 1;
    }
    const char *text = tok->id_to_token[id];
    size_t len = tok->id_to_token_len[id], n = 0;
    if (!text) return -1;
    // each character of the token's string stands for one byte (init_byte_to_char)
    for (size_t at = 0; at < len;) {
        int b = 0;
        while (b < 256 && (at + (size_t)tok->byte_to_char_len[b] > len ||
                           memcmp(text + at, tok->byte_to_char[b], (size_t)tok->byte_to_char_len[b]) != 0))
            b++;
        if (b == 256 || n == capacity) return -1;
        out[n++] = (char)b;
        at += (size_t)tok->byte_to_char_len[b];
    }
    return (int)n;
}

void tokenizer_free(Tokenizer *tok) {
    if (tok->kind == TOKENIZER_GPT2) {
        strmap_free(&tok->encoder);
        strmap_free(&tok->merge_ranks);
        free(tok->encoder_path);
        free(tok->id_to_token);
        free(tok->id_to_token_len);
    }
    memset(tok, 0, sizeof *tok);
}

static void push_id(int **ids, size_t *count, size_t *capacity, int id) {
    if (*count == *capacity) {
        *capacity = *capacity ? 2 * *capacity : 1024;
        int *grown = realloc(*ids, *capacity * sizeof(int));
        if (!grown) fatal("out of memory growing the token list to %zu ids", *capacity);
        *ids = grown;
    }
    (*ids)[(*count)++] = id;
}

// BPE on one pre-tokenized piece. The piece becomes a list of symbols (one per
// byte, as its stand-in character); the adjacent pair with the lowest merge rank
// is merged until no pair has a rank. Symbols are [start, end) spans of `buf`.
static void bpe_piece(const Tokenizer *tok, const char *piece, size_t len, int **ids, size_t *count,
                      size_t *capacity) {
    char buf[3 * 512];
    size_t *starts = xmalloc((len + 1) * sizeof(size_t));
    size_t *ends = xmalloc((len + 1) * sizeof(size_t));
    char *big = len * 2 > sizeof buf ? xmalloc(len * 2) : NULL;
    char *text = big ? big : buf;
    size_t n = 0, pos = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)piece[i];
        starts[n] = pos;
        memcpy(text + pos, tok->byte_to_char[b], (size_t)tok->byte_to_char_len[b]);
        pos += (size_t)tok->byte_to_char_len[b];
        ends[n++] = pos;
    }
    char pair[3 * 512 * 2 + 1];
    char *pair_buf = big ? xmalloc(pos + 2) : pair;
    for (;;) {
        int best_rank = -1;
        size_t best = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            size_t left = ends[i] - starts[i], right = ends[i + 1] - starts[i + 1];
            memcpy(pair_buf, text + starts[i], left);
            pair_buf[left] = ' ';
            memcpy(pair_buf + left + 1, text + starts[i + 1], right);
            int rank = strmap_get(&tok->merge_ranks, pair_buf, left + 1 + right);
            if (rank >= 0 && (best_rank < 0 || rank < best_rank)) {
                best_rank = rank;
                best = i;
            }
        }
        if (best_rank < 0) break;
        // symbols are contiguous in text, so merging just widens the left span
        ends[best] = ends[best + 1];
        memmove(starts + best + 1, starts + best + 2, (n - best - 2) * sizeof(size_t));
        memmove(ends + best + 1, ends + best + 2, (n - best - 2) * sizeof(size_t));
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        size_t symbol_len = ends[i] - starts[i];
        int id = strmap_get(&tok->encoder, text + starts[i], symbol_len);
        if (id < 0)  // vocab.bpe merged into a symbol that encoder.json lacks: the two files do not match
            fatal("%s: has no id for the symbol \"%.*s\"%s, which the merges in vocab.bpe produce", tok->encoder_path,
                  symbol_len > 64 ? 64 : (int)symbol_len, text + starts[i], symbol_len > 64 ? "..." : "");
        push_id(ids, count, capacity, id);
    }
    if (big) { free(big); free(pair_buf); }
    free(starts);
    free(ends);
}

void tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int **ids,
                      size_t *count, size_t *capacity) {
    if (tok->kind == TOKENIZER_BYTE) {
        for (size_t i = 0; i < len; i++) push_id(ids, count, capacity, (unsigned char)text[i]);
        return;
    }
    for (size_t i = 0; i < len;) {
        size_t piece = gpt2_pretokenize_next(text + i, len - i);
        bpe_piece(tok, text + i, piece, ids, count, capacity);
        i += piece;
    }
}

size_t tokenizer_chunk_end(const Tokenizer *tok, const char *text, size_t len, size_t start, size_t bytes) {
    if (len - start <= bytes) return len;
    if (tok->kind == TOKENIZER_BYTE) return start + bytes;
    size_t end = start;  // pieces are encoded independently: any piece boundary will do
    while (end < len && end - start < bytes) end += gpt2_pretokenize_next(text + end, len - end);
    return end;
}
