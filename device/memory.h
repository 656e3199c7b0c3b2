// memory.h: the accounting allocator. Every buffer a rank holds for training is
// allocated here under one category, so the per-rank memory plots count bytes
// that really exist rather than bytes a formula predicts. The memory comes from
// the account's cache (cache.h), which keeps freed blocks for reuse: the
// categories count the bytes in use, the cache's `reserved` what it holds.
#ifndef SHARDLAB_MEMORY_H
#define SHARDLAB_MEMORY_H

#include <stddef.h>

#include "device/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MEM_PARAMS,           // resident parameters: full replica, owned tensors or slices
    MEM_PARAMS_GATHERED,  // temporary full copies of parameters owned elsewhere
    MEM_GRADS,            // resident gradients, same layout as MEM_PARAMS
    MEM_GRADS_GATHERED,   // temporary full gradients before they are reduced away
    MEM_OPTIM,            // AdamW first and second moments
    MEM_ACTIVATIONS,      // forward activations and backward scratch
    MEM_COMM_BUFFERS,     // staging buffers used only by collectives
    MEM_EMA,              // --ema: the moving average of the parameters this rank keeps (fp32)
    // host memory (--offload-optimizer), counted apart from the device's totals:
    MEM_HOST_OPTIM,       // the fp32 master and the AdamW moments, updated by the CPU
    MEM_HOST_STAGING,     // the gradient share on its way down, a bf16 run's parameters on their way up
    MEM_NUM_CATEGORIES
} MemCategory;

// 1 for the categories held in host memory (MEM_HOST_*): they count toward
// host_current and host_peak, never toward the device's total_current and total_peak.
int mem_on_host(MemCategory category);

// Where in a training step an allocation or free happens (set by the passes,
// run/passes.c; named as the trace's spans are).
typedef enum {
    PHASE_SETUP,           // outside a step: init, evaluation, checkpoints
    PHASE_GATHER_FORWARD,  // before_forward(u)
    PHASE_FORWARD,         // the model's forward of u
    PHASE_RELEASE_FORWARD, // after_forward(u)
    PHASE_GATHER_BACKWARD, // before_backward(u)
    PHASE_BACKWARD,        // the model's backward of u
    PHASE_REDUCE,          // after_backward(u)
    PHASE_FINISH_GRADS,    // finish_grads()
    PHASE_OPTIMIZER,       // clipping and step()
    MEM_NUM_PHASES
} MemPhase;

extern const char *const mem_phase_names[MEM_NUM_PHASES];  // "setup", "gather fwd", "forward", ...

// One allocation or free, as an attached timeline keeps it (mem_timeline.h).
typedef struct {
    double time;          // timer_now() when it happened (a dry run: the virtual clock's time)
    MemPhase phase;
    int unit;             // the unit the phase belongs to (-1: none)
    MemCategory category;
    long long bytes;      // > 0: allocated, < 0: freed
    uint64_t total;       // the account's device bytes in use after it (host categories apart)
} MemEvent;

// The events of an account while a timeline is attached (mem_timeline_start).
typedef struct MemTimeline {
    MemEvent *events;  // (count)
    size_t count, capacity;
    uint64_t start[MEM_NUM_CATEGORIES];  // each category's bytes in use when recording began
    double began, ended;  // when recording began and stopped (timer_now(), or a dry run's virtual clock)
} MemTimeline;

typedef struct {  // bytes, 64-bit as the cache's (cache.h)
    uint64_t current[MEM_NUM_CATEGORIES];
    uint64_t peak[MEM_NUM_CATEGORIES];
    uint64_t total_current;
    uint64_t total_peak;  // peak of the sum over the device's categories (not the sum of peaks)
    uint64_t host_current, host_peak;  // the same over the host's categories
    Cache cache;        // where mem_alloc_floats' memory comes from; empty again once all is freed
    Cache host_cache;   // the same for the host's categories (dry when `cache` is)
    MemPhase phase;     // where the step is now, and in which unit (-1: none)
    int unit;
    MemTimeline *timeline;    // NULL, or where every change is recorded (mem_timeline.h)
    const double *clock_now;  // NULL (wall time), or a virtual clock's time for the timeline (a dry run)
} MemAccount;

// Sets the account's phase and unit (the passes call it; -1: no unit).
void mem_set_phase(MemAccount *acct, MemPhase phase, int unit);

extern const char *const mem_category_names[MEM_NUM_CATEGORIES];

// Zero-filled float buffer counted under `category`, from the account's cache.
// On a dry account (acct->cache.dry set before first use: build/plan's dry
// device) the same books are kept and the buffer is an address no memory stands
// behind (cache.h).
float *mem_alloc_floats(MemAccount *acct, MemCategory category, size_t count);
// Gives a buffer from mem_alloc_floats back to the cache; `count` must be the
// count it was allocated with. NULL is nothing to free.
void mem_free_floats(MemAccount *acct, MemCategory category, float *ptr, size_t count);
// The same for `count` elements of `size` bytes each (bf16 buffers: size 2).
void *mem_alloc_elements(MemAccount *acct, MemCategory category, size_t count, size_t size);
// The same for a buffer its user writes whole before reading any of it: not zero-filled when it
// is a block the cache held (cache_alloc_overwritten). Freed with mem_free_elements.
void *mem_alloc_overwritten(MemAccount *acct, MemCategory category, size_t count, size_t size);
void mem_free_elements(MemAccount *acct, MemCategory category, void *ptr, size_t count, size_t size);
// The same for ints (token ids).
int *mem_alloc_ints(MemAccount *acct, MemCategory category, size_t count);
void mem_free_ints(MemAccount *acct, MemCategory category, int *ptr, size_t count);
// Bytes the account's cache holds (in use + cached), now and at the peak.
uint64_t mem_reserved_bytes(const MemAccount *acct);
uint64_t mem_reserved_peak_bytes(const MemAccount *acct);
// Records bytes held elsewhere (e.g. device memory) without allocating host memory.
void mem_account_add(MemAccount *acct, MemCategory category, size_t bytes);
void mem_account_sub(MemAccount *acct, MemCategory category, size_t bytes);
// Peak resident set size of this process as reported by the OS, in bytes.
size_t mem_rss_peak_bytes(void);
// Exits with a message giving both sizes in GB when `bytes` more host memory
// cannot fit: more than the kernel's MemAvailable, or than an address-space
// limit (ulimit -v) leaves. `what` names what needs it. Asked before large
// allocations whose size comes from user input, so they fail at once, by name.
void mem_require_host(size_t bytes, const char *what);

#ifdef __cplusplus
}
#endif

#endif
