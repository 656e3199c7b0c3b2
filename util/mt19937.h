// mt19937.h: the Mersenne Twister MT19937 of Matsumoto and Nishimura's reference
// mt19937ar.c: init_genrand and genrand_int32, as llm.c uses them to shuffle
// its training data (and as C++'s std::mt19937 is defined).
#ifndef SHARDLAB_MT19937_H
#define SHARDLAB_MT19937_H

#include <stdint.h>

#define MT19937_N 624

typedef struct {
    uint32_t state[MT19937_N];
    int next;  // index of the next word to temper; MT19937_N: twist first
} Mt19937;

// init_genrand(seed).
void mt19937_seed(Mt19937 *mt, uint32_t seed);
// genrand_int32(): the next 32-bit output.
uint32_t mt19937_next(Mt19937 *mt);
// llm.c's random_permutation: for i = n-1 down to 1, j = next() % (i + 1), swap
// data[i] and data[j] (a Fisher-Yates shuffle, with llm.c's modulo bias).
void mt19937_shuffle(Mt19937 *mt, int *data, int n);

#endif
