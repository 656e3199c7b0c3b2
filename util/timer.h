// timer.h: wall-clock seconds from a monotonic clock.
#ifndef SHARDLAB_TIMER_H
#define SHARDLAB_TIMER_H

#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

static inline double timer_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#ifdef __cplusplus
}
#endif

#endif
