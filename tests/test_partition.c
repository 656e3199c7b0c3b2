// The ZeRO-3 partitioner against the rule it implements, written out plainly:
// largest tensor first (ties in tensor order), each onto the rank that holds the
// fewest elements so far (ties to the lowest rank), for world sizes from 1 to
// far beyond the number of tensors. The ZeRO-1/2 flat ranges against element
// by element counting: every element of [0, P) has exactly one owner, ranges
// are equal, contiguous and in rank order, and overlaps count what they cover.
// FSDP's row slices against counting rows.
#include <check.h>
#include <stdlib.h>

#include "kit/partition.h"
#include "tests/check_main.h"

static void plain_partition(const GPT2Layout *layout, int world, int *owner) {
    int n = layout->num_tensors;
    int *done = calloc((size_t)n, sizeof(int));
    size_t *load = calloc((size_t)world, sizeof(size_t));
    for (int i = 0; i < n; i++) {
        int pick = -1;  // the largest tensor not yet placed, the first of equals
        for (int t = 0; t < n; t++)
            if (!done[t] && (pick < 0 || layout->tensors[t].numel > layout->tensors[pick].numel)) pick = t;
        int least = 0;
        for (int r = 1; r < world; r++)
            if (load[r] < load[least]) least = r;
        owner[pick] = least;
        load[least] += layout->tensors[pick].numel;
        done[pick] = 1;
    }
    free(done);
    free(load);
}

static void check_against_plain(GPT2Config c, int world) {
    GPT2Layout layout;
    gpt2_layout_init(&layout, c);
    int *got = malloc((size_t)layout.num_tensors * sizeof(int));
    int *want = malloc((size_t)layout.num_tensors * sizeof(int));
    whole_tensor_owners(&layout, world, got);
    plain_partition(&layout, world, want);
    for (int t = 0; t < layout.num_tensors; t++)
        ck_assert_msg(got[t] == want[t], "N=%d: %s owned by rank %d, expected %d", world, layout.tensors[t].name,
                      got[t], want[t]);
    free(got);
    free(want);
    gpt2_layout_free(&layout);
}

START_TEST(test_zero3_partition_follows_its_rule) {
    GPT2Config odd = {.max_seq_len = 37, .vocab_size = 101, .padded_vocab_size = 128, .num_layers = 2,
                      .num_heads = 2, .channels = 38};  // 28 tensors, many of equal size
    GPT2Config deep = {.max_seq_len = 16, .vocab_size = 50, .padded_vocab_size = 128, .num_layers = 9,
                       .num_heads = 1, .channels = 8};  // 112 tensors
    for (int world = 1; world <= 130; world++) {
        check_against_plain(odd, world);
        check_against_plain(deep, world);
    }
    check_against_plain(odd, 100000);
    check_against_plain(deep, 1 << 20);
}
END_TEST

// Element by element: the owner of e is the rank whose range holds it, and a
// span's overlap with each rank adds up to the span.
static void check_flat_ranges(size_t P, int world) {
    size_t S = flat_range_numel(P, world);
    ck_assert_msg(S * (size_t)world >= P && (S - 1) * (size_t)world < P,
                  "P=%zu N=%d: S=%zu is not ceil(P/N)", P, world, S);
    size_t expect_begin = 0;
    for (int r = 0; r < world; r++) {
        size_t begin, end;
        flat_range(P, world, r, &begin, &end);
        ck_assert_msg(begin == expect_begin && end - begin == S, "P=%zu N=%d rank %d: [%zu, %zu)", P, world, r,
                      begin, end);
        expect_begin = end;
    }
    for (size_t e = 0; e < P; e++) {
        int owner = flat_range_owner(P, world, e);
        size_t begin, end;
        flat_range(P, world, owner, &begin, &end);
        ck_assert_msg(begin <= e && e < end, "P=%zu N=%d: element %zu given to rank %d [%zu, %zu)", P, world, e,
                      owner, begin, end);
    }
    size_t spans[][2] = {{0, P}, {1, P > 3 ? P - 3 : 0}, {P / 3, P / 5 + 1}, {P - 1, 1}, {S ? S - 1 : 0, 2}};
    for (size_t k = 0; k < sizeof spans / sizeof spans[0]; k++) {
        size_t first = spans[k][0], count = spans[k][1], total = 0;
        if (first + count > P) continue;
        for (int r = 0; r < world; r++) {
            size_t begin, end, n = flat_range_overlap(P, world, r, first, count, &begin, &end), want = 0;
            for (size_t e = first; e < first + count; e++) want += flat_range_owner(P, world, e) == r;
            ck_assert_msg(n == want && end - begin == n, "P=%zu N=%d rank %d: overlap of [%zu, +%zu) is %zu, want %zu",
                          P, world, r, first, count, n, want);
            if (n) ck_assert_msg(flat_range_owner(P, world, begin) == r && flat_range_owner(P, world, end - 1) == r,
                                 "P=%zu N=%d rank %d: overlap [%zu, %zu) outside the range", P, world, r, begin, end);
            total += n;
        }
        ck_assert_msg(total == count, "P=%zu N=%d: overlaps of [%zu, +%zu) cover %zu", P, world, first, count, total);
    }
}

START_TEST(test_zero12_flat_ranges) {
    size_t sizes[] = {1, 2, 7, 100, 101, 1031, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int world = 1; world <= 13; world++) check_flat_ranges(sizes[i], world);
    check_flat_ranges(1031, 1024);
    check_flat_ranges(5, 1024);  // more ranks than elements: the ranges past P are all padding
    ck_assert_uint_eq(flat_range_numel(124475904, 1024), 121559);
    ck_assert_int_eq(flat_range_owner(124475904, 1024, 124475903), 1023);
}
END_TEST

// FSDP's row slices against counting rows one by one: slice r of a tensor of
// `rows` rows is rows [r k, r k + k) with k = ceil(rows / N); the real ones are
// those below `rows` (the rest padding), and every real row is in exactly one.
START_TEST(test_row_slices) {
    int shapes[] = {1, 2, 3, 7, 64, 65, 1024};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int world = 1; world <= 70; world += world < 9 ? 1 : 7) {
            GPT2Tensor tensor = {.rows = shapes[i], .cols = 3, .numel = (size_t)shapes[i] * 3};
            int k = (shapes[i] + world - 1) / world, covered = 0;
            ck_assert_int_eq(row_slice_rows(&tensor, world), k);
            ck_assert_uint_eq(row_slice_numel(&tensor, world), (size_t)k * 3);
            ck_assert_uint_eq(row_slice_padded_numel(&tensor, world), (size_t)k * world * 3);
            for (int r = 0; r < world; r++) {
                int first = -1, count = row_slice_real_rows(&tensor, world, r, &first);
                int want = r * k >= shapes[i] ? 0 : (r * k + k > shapes[i] ? shapes[i] - r * k : k);
                ck_assert_msg(count == want && (count == 0 || first == r * k),
                              "rows %d, N=%d, rank %d: rows [%d, +%d), expected [%d, +%d)", shapes[i], world, r, first,
                              count, r * k, want);
                covered += count;
            }
            ck_assert_int_eq(covered, shapes[i]);
        }
}
END_TEST

int main(void) {
    Suite *s = suite_create("partition");
    TCase *tc = tcase_create("zero3");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_zero3_partition_follows_its_rule);
    suite_add_tcase(s, tc);
    TCase *flat = tcase_create("zero12");
    tcase_add_test(flat, test_zero12_flat_ranges);
    suite_add_tcase(s, flat);
    TCase *rows = tcase_create("fsdp");
    tcase_add_test(rows, test_row_slices);
    suite_add_tcase(s, rows);
    return run_suite(s);
}
