// cache.h: the caching allocator under the accountant (memory.c), in the spirit
// of PyTorch's CUDA caching allocator, with the simplest policy that does the
// job. A freed block does not go back to the C library (which hands large blocks
// straight back to the OS, so that the next step pays page faults to touch them
// again); it waits in the bin of its exact size, and the next request for that
// size takes it back, zero-filled again (unless its user overwrites it whole anyway:
// cache_alloc_overwritten). No rounding, no splitting, no merging:
// a training step asks for the same sizes in the same order every time, so
// after the first step every request is a hit.
//
//   in use: a (1000 B), b1 (4096 B)              reserved 5096, in use 5096
//   free(b1)      -> bins: [4096: b1]            reserved 5096, in use 1000
//   alloc(4096 B) -> b1 again, zeroed            reserved 5096, in use 5096
//   alloc(512 B)  -> no 512 bin: a new block b2  reserved 5608, in use 5608
//   free all three -> back to the C library      reserved 0
//
// The price is `reserved`: the bytes the cache holds, in use plus cached. While
// anything is in use nothing is returned, so a block of a size never asked for
// again stays, and the peak of `reserved` is, summed over sizes, the size times
// the most blocks of that size ever in use at once. When the last block in use
// comes back, every cached block goes back to the C library: an owner that
// frees what it allocates leaves nothing behind. (Counted are the bytes asked
// for; the C library's own overhead, and the header in front of each block that
// remembers its size, show only in the process's RSS.)
//
// A dry cache (build/plan's dry device) keeps the same books for sizes alone: it
// allocates nothing and hands out addresses that no memory stands behind (a
// block reused is the same address again), so the planner can run the trainers'
// own code through the same policy and predict `reserved` exactly. That is why sizes are matched
// exactly: a best fit would have to know which block each buffer got.
#ifndef SHARDLAB_CACHE_H
#define SHARDLAB_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    size_t bytes;     // the size of every block in this bin
    void **blocks;    // (count) cached blocks, the most recently freed last (dry: addresses alone)
    size_t count, capacity;
} CacheBin;

typedef struct {
    CacheBin *bins;          // (num_bins) by increasing size; a bin stays once made, even empty
    size_t num_bins, bins_capacity;
    size_t blocks_in_use;    // blocks handed out and not given back
    // Byte totals are 64-bit everywhere: the browser's planner (make web) has a
    // 32-bit size_t, and a rank's memory may pass 4 GiB in any plan.
    uint64_t in_use, cached;  // bytes of the blocks handed out, and of the blocks in the bins
    uint64_t reserved_peak;   // the peak of in_use + cached
    int dry;                 // set before first use: sizes only, no memory
    uintptr_t next_dry;      // dry: the address the next new block gets
} Cache;

// A zero-filled block of `bytes` (a dry cache's: an address alone, never to be touched).
void *cache_alloc(Cache *c, size_t bytes);
// The same for a user that writes all of it before reading any: a block taken back from a bin
// keeps what it held (no zero-fill, a pass over its memory saved); a new one is zero.
void *cache_alloc_overwritten(Cache *c, size_t bytes);
// Gives back a block from cache_alloc; `bytes` must be the
// size it was asked with, or the process stops with an error.
void cache_free(Cache *c, void *block, size_t bytes);
// Bytes the cache holds now: in use plus cached.
uint64_t cache_reserved(const Cache *c);

#ifdef __cplusplus
}
#endif

#endif
