// ckpt_manifest.h: a checkpoint's manifest, the text file that says what the
// checkpoint holds and where:
//
//   shardlab-checkpoint 1
//   strategy fsdp              world_size 4            step 10
//   data_position 1920         seed 1337               config maxT V L NH C Vp
//   ema 0.99                   (only when the run kept --ema weights: their decay)
//   precision bf16             (the run's --precision; a manifest from before it was kept has none)
//   files 2                    file 0 rank_00000.bin <bytes>   ...
//   pieces 56                  piece <tensor> <first row> <rows>
//                                    (<file> <offset> <crc32>) x3 for params, m, v (x4: and the EMA)
//                                    <adam step>
//   end <crc32 of everything above>
//
// (one field per line). The parser never exits, so it can be fuzzed.
#ifndef SHARDLAB_CKPT_MANIFEST_H
#define SHARDLAB_CKPT_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "models/gpt2.h"

#define CKPT_MAX_PATH 64
#define CKPT_MAX_PARTS 4  // of a piece's rows: params, AdamW m, AdamW v, and with --ema their EMA

typedef struct {
    int tensor;
    int row_begin, row_count;
    int file[CKPT_MAX_PARTS];         // index into files[] of params, m, v (, ema)
    uint64_t offset[CKPT_MAX_PARTS];  // byte offsets of each
    uint32_t crc[CKPT_MAX_PARTS];
    int adam_step;
} CkptPiece;

typedef struct {
    char strategy[16];
    int world_size;
    int step;                 // optimizer steps done
    uint64_t data_position;   // the training loader's position in tokens
    uint64_t seed;
    GPT2Config config;
    float ema_decay;          // > 0: the run's --ema; every piece has a fourth part, the EMA of its parameters
    char precision[8];        // the run's --precision (fp32, bf16), "" when the manifest does not say
    int num_files;
    char (*files)[CKPT_MAX_PATH];  // (num_files) names inside the checkpoint directory
    uint64_t *file_sizes;     // (num_files)
    int num_pieces;
    CkptPiece *pieces;        // (num_pieces)
} CkptManifest;

// The parts of each piece: 3, or 4 with the EMA.
static inline int ckpt_parts(const CkptManifest *m) { return m->ema_decay > 0 ? 4 : 3; }

// Parses a manifest's text; on failure returns -1 with a message in err.
// A decay as text: the fewest digits that read back as the same float (0.9,
// not 0.899999976), as a user would type it for --ema.
typedef struct {
    char text[32];
} DecayText;
DecayText ckpt_decay_text(float decay);

int ckpt_manifest_parse(const char *text, size_t len, CkptManifest *m, char *err, size_t err_len);
void ckpt_manifest_free(CkptManifest *m);

// The manifest as text, its own CRC line included (malloc'ed).
char *ckpt_manifest_text(const CkptManifest *m, size_t *len);
// Names inside a checkpoint directory: lowercase letters, digits, '_' and '.'.
int ckpt_valid_file_name(const char *name);

#endif
