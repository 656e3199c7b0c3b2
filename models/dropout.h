// dropout.h: dropout's masks (--dropout RATE), the same on every rank and device.
//
// Under data parallelism the equivalence holds only if an element's mask depends
// on which token of the GLOBAL batch it belongs to, never on which rank runs it
// or how the batch is cut into micro-batches. So a mask is not drawn from a
// generator with state: it is a pure function (counter-based, util/random.h)
// of the seed, the step, the place in the model (layer, site), the token's row
// in the global batch, its position, and the element's index there. Any rank,
// the CPU or a GPU, recomputes it the same wherever it is needed: in the forward,
// in the backward, and in a --recompute of the forward.
//
//   key(site) = mix(seed, step, layer, site)            gpt2_dropout (gpt2.c)
//   row key   = mix(key, row0 + b, t)                    b: the row in the micro-batch
//   keep      = mix(row key + element) >> 40  >=  RATE * 2^24 (a 24-bit uniform draw)
//   kept values are scaled by 1 / (1 - RATE), dropped ones are 0
#ifndef SHARDLAB_DROPOUT_H
#define SHARDLAB_DROPOUT_H

#include <stdint.h>

#include "util/random.h"

// Where nanoGPT drops: the embeddings' sum, the attention probabilities, and the
// output of each residual branch (attention's projection, the MLP's).
typedef enum { DROPOUT_EMBEDDING, DROPOUT_ATTENTION, DROPOUT_ATTPROJ, DROPOUT_FCPROJ } DropoutSite;

typedef struct {
    uint64_t key;        // the site's, in this step and layer
    int row0;            // the global batch row of the micro-batch's row 0
    uint32_t threshold;  // RATE * 2^24: a draw below it drops the element
    float scale;         // 1 / (1 - RATE)
} Dropout;

// The key of position t of the micro-batch's row b.
static inline RANDOM_HD uint64_t dropout_row_key(const Dropout *d, int b, int t) {
    return splitmix64(splitmix64(d->key + (uint64_t)(d->row0 + b)) + (uint64_t)t);
}

// 1 if element `element` of that position is kept (and scaled), 0 if dropped.
static inline RANDOM_HD int dropout_keep(const Dropout *d, uint64_t row_key, uint64_t element) {
    return (uint32_t)(splitmix64(row_key + element) >> 40) >= d->threshold;
}

#endif
