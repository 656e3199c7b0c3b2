#include "device/memory.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"
#include "util/timer.h"

const char *const mem_category_names[MEM_NUM_CATEGORIES] = {
    "params", "params_gathered", "grads", "grads_gathered", "optim", "activations", "comm_buffers", "ema",
    "host_optim", "host_staging",
};

int mem_on_host(MemCategory category) { return category == MEM_HOST_OPTIM || category == MEM_HOST_STAGING; }

const char *const mem_phase_names[MEM_NUM_PHASES] = {
    "setup", "gather fwd", "forward", "release fwd", "gather bwd", "backward", "reduce", "finish grads", "optimizer",
};

// Keeps one change in the attached timeline (mem_timeline.h reads it).
static void record_event(MemTimeline *t, const MemAccount *acct, MemCategory category, long long bytes) {
    if (t->count == t->capacity) {
        t->capacity = t->capacity ? 2 * t->capacity : 256;
        t->events = xrealloc(t->events, t->capacity * sizeof *t->events);
    }
    double time = acct->clock_now ? *acct->clock_now : timer_now();
    t->events[t->count++] = (MemEvent){.time = time, .phase = acct->phase, .unit = acct->unit,
                                       .category = category, .bytes = bytes, .total = acct->total_current};
}

void mem_set_phase(MemAccount *acct, MemPhase phase, int unit) {
    acct->phase = phase;
    acct->unit = unit;
}

void mem_account_add(MemAccount *acct, MemCategory category, size_t bytes) {
    acct->current[category] += bytes;
    if (acct->current[category] > acct->peak[category]) acct->peak[category] = acct->current[category];
    if (mem_on_host(category)) {
        acct->host_current += bytes;
        if (acct->host_current > acct->host_peak) acct->host_peak = acct->host_current;
    } else {
        acct->total_current += bytes;
        if (acct->total_current > acct->total_peak) acct->total_peak = acct->total_current;
    }
    if (acct->timeline) record_event(acct->timeline, acct, category, (long long)bytes);
}

void mem_account_sub(MemAccount *acct, MemCategory category, size_t bytes) {
    CHECK(acct->current[category] >= bytes, "freeing %zu bytes of %s, only %" PRIu64 " accounted", bytes,
          mem_category_names[category], acct->current[category]);
    acct->current[category] -= bytes;
    if (mem_on_host(category)) acct->host_current -= bytes;
    else acct->total_current -= bytes;
    if (acct->timeline) record_event(acct->timeline, acct, category, -(long long)bytes);
}

// The device's cache, or the host's for a host category (a dry account's is dry too).
static Cache *cache_of(MemAccount *acct, MemCategory category) {
    if (!mem_on_host(category)) return &acct->cache;
    acct->host_cache.dry = acct->cache.dry;
    return &acct->host_cache;
}

static void *alloc_counted_as(MemAccount *acct, MemCategory category, size_t count, size_t size, int zero) {
    if (count > SIZE_MAX / size)
        fatal("out of memory: %zu elements of %zu bytes overflow a size%s", count, size,
              SIZE_MAX <= UINT32_MAX ? " (the browser's planner counts a buffer in 32 bits; build/plan has no such "
                                       "limit)" : "");
    Cache *cache = cache_of(acct, category);
    void *ptr = zero ? cache_alloc(cache, count * size) : cache_alloc_overwritten(cache, count * size);
    mem_account_add(acct, category, count * size);
    return ptr;
}

static void *alloc_counted(MemAccount *acct, MemCategory category, size_t count, size_t size) {
    return alloc_counted_as(acct, category, count, size, 1);
}

static void free_counted(MemAccount *acct, MemCategory category, void *ptr, size_t bytes) {
    if (!ptr) return;
    mem_account_sub(acct, category, bytes);
    cache_free(cache_of(acct, category), ptr, bytes);
}

float *mem_alloc_floats(MemAccount *acct, MemCategory category, size_t count) {
    return alloc_counted(acct, category, count, sizeof(float));
}

void mem_free_floats(MemAccount *acct, MemCategory category, float *ptr, size_t count) {
    free_counted(acct, category, ptr, count * sizeof(float));
}

void *mem_alloc_elements(MemAccount *acct, MemCategory category, size_t count, size_t size) {
    return alloc_counted(acct, category, count, size);
}

void *mem_alloc_overwritten(MemAccount *acct, MemCategory category, size_t count, size_t size) {
    return alloc_counted_as(acct, category, count, size, 0);
}

void mem_free_elements(MemAccount *acct, MemCategory category, void *ptr, size_t count, size_t size) {
    free_counted(acct, category, ptr, count * size);
}

int *mem_alloc_ints(MemAccount *acct, MemCategory category, size_t count) {
    return alloc_counted(acct, category, count, sizeof(int));
}

void mem_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count) {
    free_counted(acct, category, ptr, count * sizeof(int));
}

uint64_t mem_reserved_bytes(const MemAccount *acct) { return cache_reserved(&acct->cache); }
uint64_t mem_reserved_peak_bytes(const MemAccount *acct) { return acct->cache.reserved_peak; }

