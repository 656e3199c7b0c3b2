#include "util/mt19937.h"

#define M 397
#define MATRIX_A 0x9908b0dfu
#define UPPER_MASK 0x80000000u
#define LOWER_MASK 0x7fffffffu

void mt19937_seed(Mt19937 *mt, uint32_t seed) {
    mt->state[0] = seed;
    for (uint32_t i = 1; i < MT19937_N; i++)
        mt->state[i] = 1812433253u * (mt->state[i - 1] ^ (mt->state[i - 1] >> 30)) + i;
    mt->next = MT19937_N;
}

// The next N words of the recurrence, in place.
static void twist(Mt19937 *mt) {
    uint32_t *s = mt->state;
    for (int k = 0; k < MT19937_N; k++) {
        uint32_t y = (s[k] & UPPER_MASK) | (s[(k + 1) % MT19937_N] & LOWER_MASK);
        s[k] = s[(k + M) % MT19937_N] ^ (y >> 1) ^ ((y & 1u) ? MATRIX_A : 0u);
    }
    mt->next = 0;
}

uint32_t mt19937_next(Mt19937 *mt) {
    if (mt->next >= MT19937_N) twist(mt);
    uint32_t y = mt->state[mt->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

void mt19937_shuffle(Mt19937 *mt, int *data, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt19937_next(mt) % (uint32_t)(i + 1));
        int tmp = data[i];
        data[i] = data[j];
        data[j] = tmp;
    }
}
