// The caching allocator (device/cache.c) and the accountant on top of it
// (device/memory.c): reuse, zero-fill (and its absence for a block overwritten whole), reserved bytes by
// hand, dry books.
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "device/cache.h"
#include "device/memory.h"
#include "tests/check_main.h"

static int all_zero(const unsigned char *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++)
        if (p[i]) return 0;
    return 1;
}

START_TEST(test_a_freed_block_is_reused_zeroed) {
    Cache c = {0};
    unsigned char *keep = cache_alloc(&c, 64);  // something in use, so the cache keeps what is freed
    unsigned char *a = cache_alloc(&c, 1000);
    ck_assert(all_zero(a, 1000));
    memset(a, 0xab, 1000);
    cache_free(&c, a, 1000);
    ck_assert_uint_eq(c.cached, 1000);
    unsigned char *b = cache_alloc(&c, 1000);
    ck_assert_ptr_eq(b, a);
    ck_assert(all_zero(b, 1000));
    ck_assert_uint_eq(c.cached, 0);
    ck_assert_uint_eq(cache_reserved(&c), 1064);
    cache_free(&c, b, 1000);
    cache_free(&c, keep, 64);
}
END_TEST

// A block for a user that overwrites it whole: new, zero; taken back from a bin, as it was left
// (no pass over it), with the same books as a zero-filled one; and the zero-filled kind after it
// is zero again.
START_TEST(test_an_overwritten_block_is_not_zeroed_again) {
    Cache c = {0};
    unsigned char *keep = cache_alloc(&c, 64);
    unsigned char *a = cache_alloc_overwritten(&c, 1000);
    ck_assert(all_zero(a, 1000));
    memset(a, 0xab, 1000);
    cache_free(&c, a, 1000);
    unsigned char *b = cache_alloc_overwritten(&c, 1000);
    ck_assert_ptr_eq(b, a);
    ck_assert_int_eq(b[0], 0xab);
    ck_assert_int_eq(b[999], 0xab);
    ck_assert_uint_eq(c.in_use, 1064);
    ck_assert_uint_eq(cache_reserved(&c), 1064);
    cache_free(&c, b, 1000);
    unsigned char *z = cache_alloc(&c, 1000);
    ck_assert_ptr_eq(z, a);
    ck_assert(all_zero(z, 1000));
    cache_free(&c, z, 1000);
    cache_free(&c, keep, 64);
}
END_TEST

START_TEST(test_the_most_recently_freed_block_comes_first) {
    Cache c = {0};
    void *keep = cache_alloc(&c, 8);
    void *a = cache_alloc(&c, 256), *b = cache_alloc(&c, 256);
    cache_free(&c, a, 256);
    cache_free(&c, b, 256);
    void *first = cache_alloc(&c, 256), *second = cache_alloc(&c, 256);
    ck_assert_ptr_eq(first, b);
    ck_assert_ptr_eq(second, a);
    cache_free(&c, first, 256);
    cache_free(&c, second, 256);
    cache_free(&c, keep, 8);
}
END_TEST

// Reserved = in use + cached; its peak, size by size, the most blocks in use at once.
START_TEST(test_reserved_by_hand) {
    Cache c = {0};
    void *a = cache_alloc(&c, 100), *b = cache_alloc(&c, 200);
    ck_assert_uint_eq(cache_reserved(&c), 300);
    cache_free(&c, a, 100);                      // cached: 100
    ck_assert_uint_eq(c.in_use, 200);
    ck_assert_uint_eq(cache_reserved(&c), 300);
    void *a2 = cache_alloc(&c, 100);             // the cached 100 again
    void *d = cache_alloc(&c, 100);              // a second 100: new
    ck_assert_ptr_eq(a2, a);
    ck_assert_uint_eq(cache_reserved(&c), 400);
    ck_assert_uint_eq(c.reserved_peak, 400);
    cache_free(&c, b, 200);                      // cached: 200
    void *e = cache_alloc(&c, 150);              // no 150 bin; the 200 is not taken
    ck_assert_ptr_ne(e, b);
    ck_assert_uint_eq(c.in_use, 350);
    ck_assert_uint_eq(c.cached, 200);
    ck_assert_uint_eq(cache_reserved(&c), 550);
    ck_assert_uint_eq(c.reserved_peak, 550);     // = 100 x 2 + 200 x 1 + 150 x 1
    cache_free(&c, a2, 100);
    cache_free(&c, d, 100);
    ck_assert_uint_eq(cache_reserved(&c), 550);
    cache_free(&c, e, 150);                      // the last block in use: everything goes
    ck_assert_uint_eq(cache_reserved(&c), 0);
    ck_assert_uint_eq(c.cached, 0);
    ck_assert_uint_eq(c.num_bins, 0);
    ck_assert_ptr_null(c.bins);
    ck_assert_uint_eq(c.reserved_peak, 550);
}
END_TEST

START_TEST(test_sizes_of_one_and_zero) {
    Cache c = {0};
    unsigned char *one = cache_alloc(&c, 1), *none = cache_alloc(&c, 0);
    ck_assert_ptr_nonnull(one);
    ck_assert_ptr_nonnull(none);
    ck_assert_uint_eq(one[0], 0);
    one[0] = 7;
    ck_assert_uint_eq(cache_reserved(&c), 1);
    cache_free(&c, none, 0);
    cache_free(&c, one, 1);
    ck_assert_uint_eq(cache_reserved(&c), 0);
    MemAccount acct = {0};
    float *f = mem_alloc_floats(&acct, MEM_PARAMS, 1);
    ck_assert_float_eq(f[0], 0.0f);
    ck_assert_uint_eq(acct.current[MEM_PARAMS], sizeof(float));
    ck_assert_uint_eq(mem_reserved_bytes(&acct), sizeof(float));
    mem_free_floats(&acct, MEM_PARAMS, f, 1);
}
END_TEST

// The accountant counts bytes in use per category, as before the cache; the
// cache's reserved bytes come on top.
START_TEST(test_accounting_counts_bytes_in_use) {
    MemAccount acct = {0};
    float *grads = mem_alloc_floats(&acct, MEM_GRADS, 10);
    float *gathered = mem_alloc_floats(&acct, MEM_PARAMS_GATHERED, 1000);
    int *batch = mem_alloc_ints(&acct, MEM_ACTIVATIONS, 6);
    mem_free_floats(&acct, MEM_PARAMS_GATHERED, gathered, 1000);
    mem_free_floats(&acct, MEM_PARAMS_GATHERED, NULL, 1000);  // NULL: nothing to free
    ck_assert_uint_eq(acct.current[MEM_PARAMS_GATHERED], 0);
    ck_assert_uint_eq(acct.peak[MEM_PARAMS_GATHERED], 4000);
    ck_assert_uint_eq(acct.total_current, 40 + 24);
    ck_assert_uint_eq(acct.total_peak, 40 + 4000 + 24);
    ck_assert_uint_eq(mem_reserved_bytes(&acct), 40 + 4000 + 24);
    float *again = mem_alloc_floats(&acct, MEM_COMM_BUFFERS, 1000);  // another category, the same block
    ck_assert_ptr_eq(again, gathered);
    ck_assert_uint_eq(acct.total_current, 40 + 4000 + 24);
    ck_assert_uint_eq(mem_reserved_peak_bytes(&acct), 40 + 4000 + 24);
    mem_free_floats(&acct, MEM_COMM_BUFFERS, again, 1000);
    mem_free_ints(&acct, MEM_ACTIVATIONS, batch, 6);
    mem_free_floats(&acct, MEM_GRADS, grads, 10);
    ck_assert_uint_eq(acct.total_current, 0);
    ck_assert_uint_eq(mem_reserved_bytes(&acct), 0);
}
END_TEST

// A dry cache keeps the same books as a real one, block for block, and hands out
// addresses of its own: distinct while held, the same one again where the real
// cache reuses a block.
START_TEST(test_a_dry_cache_keeps_the_same_books) {
    Cache real = {0}, dry = {.dry = 1};
    enum { SLOTS = 8, MOVES = 2000 };
    void *held[SLOTS] = {0}, *dry_held[SLOTS] = {0}, *pair_real[MOVES], *pair_dry[MOVES];
    int pairs = 0;
    size_t size[SLOTS] = {0};
    int taken[SLOTS] = {0};
    uint32_t x = 12345;
    for (int i = 0; i < MOVES; i++) {
        x = x * 1664525u + 1013904223u;  // a fixed pseudo-random walk over a few sizes
        int k = (int)(x >> 28) % SLOTS;
        if (taken[k]) {
            cache_free(&real, held[k], size[k]);
            cache_free(&dry, dry_held[k], size[k]);
            taken[k] = 0;
        } else {
            size[k] = 64 * (1 + (x >> 8) % 5);
            size_t cached = real.cached;
            held[k] = cache_alloc(&real, size[k]);
            dry_held[k] = cache_alloc(&dry, size[k]);
            ck_assert_ptr_nonnull(held[k]);
            for (int j = 0; j < SLOTS; j++)  // a block handed out twice at once would be two buffers in one
                if (j != k && taken[j]) ck_assert(dry_held[j] != dry_held[k]);
            if (real.cached < cached)  // a reused block: the dry cache reuses the same one
                for (int p = pairs - 1; p >= 0; p--)
                    if (pair_real[p] == held[k]) {
                        ck_assert_ptr_eq(pair_dry[p], dry_held[k]);
                        break;
                    }
            pair_real[pairs] = held[k], pair_dry[pairs++] = dry_held[k];
            taken[k] = 1;
        }
        ck_assert_uint_eq(dry.in_use, real.in_use);
        ck_assert_uint_eq(dry.cached, real.cached);
        ck_assert_uint_eq(dry.reserved_peak, real.reserved_peak);
    }
    for (int k = 0; k < SLOTS; k++)
        if (taken[k]) {
            cache_free(&real, held[k], size[k]);
            cache_free(&dry, dry_held[k], size[k]);
        }
    ck_assert_uint_eq(cache_reserved(&real), 0);
    ck_assert_uint_eq(cache_reserved(&dry), 0);
    ck_assert_uint_gt(real.reserved_peak, 0);
}
END_TEST

START_TEST(test_a_dry_account_replays_without_memory) {
    MemAccount acct = {.cache.dry = 1};
    float *params = mem_alloc_floats(&acct, MEM_PARAMS, 100), *gathered = mem_alloc_floats(&acct, MEM_PARAMS_GATHERED, 50);
    ck_assert(params != gathered);
    mem_free_floats(&acct, MEM_PARAMS_GATHERED, gathered, 50);
    float *grads = mem_alloc_floats(&acct, MEM_GRADS_GATHERED, 50);
    ck_assert_ptr_eq(grads, gathered);  // the block just freed, reused
    mem_free_floats(&acct, MEM_GRADS_GATHERED, NULL, 50);  // NULL is nothing to free, dry or not
    ck_assert_uint_eq(acct.current[MEM_GRADS_GATHERED], 200);
    ck_assert_uint_eq(acct.peak[MEM_PARAMS_GATHERED], 200);
    ck_assert_uint_eq(acct.total_peak, 600);
    ck_assert_uint_eq(mem_reserved_peak_bytes(&acct), 600);  // the 50 floats were taken again
    mem_free_floats(&acct, MEM_GRADS_GATHERED, grads, 50);
    mem_free_floats(&acct, MEM_PARAMS, params, 100);
    ck_assert_uint_eq(mem_reserved_bytes(&acct), 0);
}
END_TEST

START_TEST(test_giving_back_more_than_is_in_use_stops) {
    Cache c = {0};
    void *a = cache_alloc(&c, 100);
    cache_free(&c, a, 200);
}
END_TEST

START_TEST(test_giving_back_with_another_size_stops) {
    Cache c = {0};
    void *a = cache_alloc(&c, 96), *b = cache_alloc(&c, 100);
    cache_free(&c, a, 100);  // in the 100 bin, the 96 bytes' next owner would write past their end
    cache_free(&c, b, 100);
}
END_TEST

START_TEST(test_giving_back_to_an_empty_cache_stops) {
    Cache c = {0};
    char block[16];
    cache_free(&c, block, sizeof block);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("cache");
    tcase_add_test(tc, test_a_freed_block_is_reused_zeroed);
    tcase_add_test(tc, test_an_overwritten_block_is_not_zeroed_again);
    tcase_add_test(tc, test_the_most_recently_freed_block_comes_first);
    tcase_add_test(tc, test_reserved_by_hand);
    tcase_add_test(tc, test_sizes_of_one_and_zero);
    tcase_add_test(tc, test_accounting_counts_bytes_in_use);
    tcase_add_test(tc, test_a_dry_cache_keeps_the_same_books);
    tcase_add_test(tc, test_a_dry_account_replays_without_memory);
    tcase_add_exit_test(tc, test_giving_back_more_than_is_in_use_stops, 1);
    tcase_add_exit_test(tc, test_giving_back_with_another_size_stops, 1);
    tcase_add_exit_test(tc, test_giving_back_to_an_empty_cache_stops, 1);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
