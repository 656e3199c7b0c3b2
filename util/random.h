// random.h: counter-based random numbers. Value i of stream s is a pure function
// of (seed, s, i), so any rank can make any slice of a random tensor on its own
// and every rank count produces the same model.
#ifndef SHARDLAB_RANDOM_H
#define SHARDLAB_RANDOM_H

#include <math.h>
#include <stdint.h>

// Callable from GPU kernels too (dropout's masks, models/dropout.h).
#ifdef __CUDACC__
#define RANDOM_HD __host__ __device__
#else
#define RANDOM_HD
#endif

static inline RANDOM_HD uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Uniform in (0, 1].
static inline double random_uniform(uint64_t seed, uint64_t stream, uint64_t index, int which) {
    uint64_t h = splitmix64(splitmix64(seed ^ splitmix64(stream)) + 2 * index + (uint64_t)which);
    return ((double)(h >> 11) + 1.0) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller.
static inline double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = random_uniform(seed, stream, index, 0);
    double u2 = random_uniform(seed, stream, index, 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
