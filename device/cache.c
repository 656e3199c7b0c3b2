// cache.c: bins of exact sizes, found by binary search (see cache.h for the policy).
#include "device/cache.h"

#include <stdalign.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/errors.h"

// In front of every real block: the size it was taken with. A block given back
// with another size would land in the wrong bin, and its next owner would write
// past its end; the header turns that into an error at the cache_free that did
// it. Its alignment (16 bytes on x86-64, its size too) keeps the caller's memory
// as aligned as malloc's.
typedef struct {
    alignas(max_align_t) size_t bytes;
} BlockHeader;

// The index of the bin of `bytes`, or where it would go; *found says which.
static size_t find_bin(const Cache *c, size_t bytes, int *found) {
    size_t lo = 0, hi = c->num_bins;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->bins[mid].bytes < bytes) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < c->num_bins && c->bins[lo].bytes == bytes;
    return lo;
}

static CacheBin *bin_for(Cache *c, size_t bytes) {
    int found;
    size_t at = find_bin(c, bytes, &found);
    if (found) return &c->bins[at];
    if (c->num_bins == c->bins_capacity) {
        c->bins_capacity = c->bins_capacity ? 2 * c->bins_capacity : 16;
        c->bins = xrealloc(c->bins, c->bins_capacity * sizeof(CacheBin));
    }
    memmove(&c->bins[at + 1], &c->bins[at], (c->num_bins - at) * sizeof(CacheBin));
    c->bins[at] = (CacheBin){.bytes = bytes};
    c->num_bins++;
    return &c->bins[at];
}

// Every cached block back to the C library, and the bins with them.
static void release_all(Cache *c) {
    for (size_t i = 0; i < c->num_bins; i++) {
        for (size_t k = 0; k < c->bins[i].count && !c->dry; k++) free(c->bins[i].blocks[k]);
        free(c->bins[i].blocks);
    }
    free(c->bins);
    c->bins = NULL;
    c->num_bins = c->bins_capacity = 0;
    c->cached = 0;
}

// A dry block: an address of its own, never dereferenced, past the end of the
// previous one, from an address space no process maps (x86-64's user space ends
// below 2^47, so touching one is a fault at once). With 32-bit addresses (the
// browser's planner, make web) the dry blocks start at 2^31, above the 1 GiB its
// memory may grow to, and take one header's step each whatever their size: 2^31
// bytes could not hold a large rank's blocks end to end, and nothing reads a dry
// block's bytes, so an address is only its name.
#if UINTPTR_MAX > 0xFFFFFFFFu
#define DRY_BASE ((uintptr_t)1 << 48)
#define DRY_STEP(bytes) (sizeof(BlockHeader) + ((bytes) + sizeof(BlockHeader) - 1) / sizeof(BlockHeader) * sizeof(BlockHeader))
#else
#define DRY_BASE ((uintptr_t)1 << 31)
#define DRY_STEP(bytes) sizeof(BlockHeader)
#endif

static BlockHeader *dry_block(Cache *c, size_t bytes) {
    if (c->next_dry == 0) c->next_dry = DRY_BASE;
    size_t step = DRY_STEP(bytes);
    if (bytes > SIZE_MAX / 2 || c->next_dry > UINTPTR_MAX - step)
        fatal("out of memory: a dry block of %zu bytes%s", bytes,
              SIZE_MAX <= UINT32_MAX ? " (the browser's planner counts a buffer in 32 bits; build/plan has no such "
                                       "limit)" : "");
    BlockHeader *block = (BlockHeader *)c->next_dry;
    c->next_dry += step;
    return block;
}

// A block of `bytes`, zero-filled if `zero` (a new block always is).
static void *take(Cache *c, size_t bytes, int zero) {
    int found;
    size_t at = find_bin(c, bytes, &found);
    BlockHeader *block;
    if (found && c->bins[at].count > 0) {  // a hit: the most recently freed block of this size
        CacheBin *bin = &c->bins[at];
        block = bin->blocks[--bin->count];
        c->cached -= bytes;
        if (!c->dry && zero) memset(block + 1, 0, bytes);
    } else if (c->dry) {
        block = dry_block(c, bytes);
    } else {
        if (bytes > SIZE_MAX - sizeof(BlockHeader)) fatal("out of memory: a block of %zu bytes", bytes);
        block = xcalloc(1, sizeof(BlockHeader) + bytes);  // large blocks come zeroed from the OS, untouched
        block->bytes = bytes;
    }
    c->in_use += bytes;
    c->blocks_in_use++;
    if (c->in_use + c->cached > c->reserved_peak) c->reserved_peak = c->in_use + c->cached;
    return block + 1;
}

void *cache_alloc(Cache *c, size_t bytes) { return take(c, bytes, 1); }

void *cache_alloc_overwritten(Cache *c, size_t bytes) { return take(c, bytes, 0); }

void cache_free(Cache *c, void *ptr, size_t bytes) {
    CHECK(c->blocks_in_use > 0 && c->in_use >= bytes, "cache_free: %zu bytes given back, %" PRIu64 " in use in %zu blocks",
          bytes, c->in_use, c->blocks_in_use);
    uintptr_t address = (uintptr_t)ptr;
    CHECK(ptr && (address >= DRY_BASE) == (c->dry != 0), "cache_free: a %s block given to a %s cache",
          !ptr ? "NULL" : address >= DRY_BASE ? "dry" : "real", c->dry ? "dry" : "real");
    BlockHeader *block = (BlockHeader *)ptr - 1;
    CHECK(c->dry || block->bytes == bytes, "cache_free: a block of %zu bytes given back as %zu", block->bytes, bytes);
    CacheBin *bin = bin_for(c, bytes);
    if (bin->count == bin->capacity) {
        bin->capacity = bin->capacity ? 2 * bin->capacity : 4;
        bin->blocks = xrealloc(bin->blocks, bin->capacity * sizeof(void *));
    }
    bin->blocks[bin->count++] = block;
    c->cached += bytes;
    c->in_use -= bytes;
    c->blocks_in_use--;
    if (c->blocks_in_use == 0) release_all(c);
}

uint64_t cache_reserved(const Cache *c) { return c->in_use + c->cached; }
