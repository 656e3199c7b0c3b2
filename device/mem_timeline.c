// mem_timeline.c: a step's allocations and frees as they happen (mem_timeline.h).
#include "device/mem_timeline.h"

#include <stdlib.h>
#include <string.h>

#include "util/errors.h"
#include "util/timer.h"

// The account's clock: the wall's, or a dry run's virtual one.
static double account_now(const MemAccount *acct) { return acct->clock_now ? *acct->clock_now : timer_now(); }

void mem_timeline_start(MemTimeline *t, MemAccount *acct) {
    memset(t, 0, sizeof *t);
    memcpy(t->start, acct->current, sizeof t->start);
    t->began = account_now(acct);
    acct->timeline = t;
}

void mem_timeline_stop(MemTimeline *t, MemAccount *acct) {
    CHECK(acct->timeline == t, "mem_timeline_stop: another timeline is attached");
    t->ended = account_now(acct);
    acct->timeline = NULL;
}

void mem_timeline_free(MemTimeline *t) {
    free(t->events);
    memset(t, 0, sizeof *t);
}

long mem_timeline_peak(const MemTimeline *t, uint64_t *total, uint64_t held[MEM_NUM_CATEGORIES]) {
    uint64_t now[MEM_NUM_CATEGORIES];
    memcpy(now, t->start, sizeof now);
    long at = -1;
    *total = 0;
    for (int k = 0; k < MEM_NUM_CATEGORIES; k++)
        if (!mem_on_host((MemCategory)k)) *total += now[k];
    memcpy(held, now, sizeof now);
    for (size_t i = 0; i < t->count; i++) {
        const MemEvent *e = &t->events[i];
        now[e->category] = (uint64_t)((long long)now[e->category] + e->bytes);
        if (e->total > *total) {
            *total = e->total;
            at = (long)i;
            memcpy(held, now, sizeof now);
        }
    }
    return at;
}
