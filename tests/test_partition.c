// The ZeRO-3 partitioner against the rule it implements, written out plainly:
// largest tensor first (ties in tensor order), each onto the rank that holds the
// fewest elements so far (ties to the lowest rank), for world sizes from 1 to
// far beyond the number of tensors.
#include <check.h>
#include <stdlib.h>

#include "../common/partition.h"
#include "check_main.h"

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
    zero3_partition(&layout, world, got);
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

int main(void) {
    Suite *s = suite_create("partition");
    TCase *tc = tcase_create("zero3");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_zero3_partition_follows_its_rule);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
