// tokenizer.h: text -> token ids.
//   byte: each byte is its own id (V = 256).
//   gpt2: GPT-2's byte-level BPE from the standard encoder.json + vocab.bpe,
//         after GPT-2's pre-tokenizer regex
//         's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
#ifndef SHARDLAB_TOKENIZER_H
#define SHARDLAB_TOKENIZER_H

#include <stddef.h>

#include "util/strmap.h"

typedef enum { TOKENIZER_BYTE, TOKENIZER_GPT2 } TokenizerKind;

typedef struct {
    TokenizerKind kind;
    int vocab_size;
    StrMap encoder;        // gpt2: byte-mapped token string -> id
    StrMap merge_ranks;    // gpt2: "left right" -> rank (lower merges first)
    char byte_to_char[256][3];  // gpt2: each byte as its printable stand-in, in UTF-8
    int byte_to_char_len[256];
    char *encoder_path;    // gpt2: DIR/encoder.json, for messages
    const char **id_to_token;   // gpt2: (vocab_size) each id's string in the encoder (NULL: no such id)
    size_t *id_to_token_len;    // gpt2: (vocab_size)
} Tokenizer;

// Exits with a message naming the file on any problem. vocab_dir holds
// encoder.json and vocab.bpe (gpt2); "byte" takes none (NULL).
void tokenizer_init(Tokenizer *tok, const char *kind, const char *vocab_dir);
void tokenizer_free(Tokenizer *tok);

// Appends the ids of text[0..len) to *ids (grown with realloc).
void tokenizer_encode(const Tokenizer *tok, const char *text, size_t len, int **ids,
                      size_t *count, size_t *capacity);

// The bytes of token `id` into out (room for `capacity`); returns how many, or
// -1 when the vocabulary has no such id (or its bytes do not fit).
int tokenizer_decode(const Tokenizer *tok, int id, char *out, size_t capacity);

// Where to end a chunk of text that starts at `start` and holds at least
// `bytes` bytes (or runs to the end), so that encoding the text chunk by chunk
// gives exactly the ids of encoding it whole.
size_t tokenizer_chunk_end(const Tokenizer *tok, const char *text, size_t len, size_t start, size_t bytes);

// The pre-tokenizer alone: the byte length of the piece that starts at text[0].
size_t gpt2_pretokenize_next(const char *text, size_t len);

#endif
