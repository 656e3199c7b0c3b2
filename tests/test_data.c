// Token shards and the data-parallel loader.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/data.h"
#include "tests/check_main.h"
#include "tests/scratch_file.h"

static const char *shard_path;  // this test process's scratch file

static void write_counting_shard(size_t n) {
    shard_path = scratch_file("shard");
    uint16_t *tokens = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) tokens[i] = (uint16_t)(i % 97);
    token_shard_write(shard_path, tokens, n);
    free(tokens);
}

START_TEST(test_shard_round_trip) {
    write_counting_shard(1000);
    uint16_t *tokens;
    ck_assert_uint_eq(token_shard_read(shard_path, 97, &tokens), 1000);
    for (size_t i = 0; i < 1000; i++) ck_assert_uint_eq(tokens[i], i % 97);
    free(tokens);
    unlink(shard_path);
}
END_TEST

// N ranks together read exactly the global batch one rank reads, in row order.
START_TEST(test_ranks_split_the_global_batch) {
    int B = 12, T = 7;
    write_counting_shard(500);
    DataLoader one;
    loader_init(&one, shard_path, 97, B, T, 0, 1);
    for (int world = 2; world <= 4; world++) {
        if (B % world) continue;
        DataLoader ranks[4];
        for (int r = 0; r < world; r++) loader_init(&ranks[r], shard_path, 97, B, T, r, world);
        loader_reset(&one);
        for (int step = 0; step < 9; step++) {  // 9 * 84 > 500: wraps around
            loader_next_batch(&one);
            size_t local = (size_t)(B / world) * T;
            for (int r = 0; r < world; r++) {
                loader_next_batch(&ranks[r]);
                ck_assert_mem_eq(ranks[r].inputs, one.inputs + r * local, local * sizeof(int));
                ck_assert_mem_eq(ranks[r].targets, one.targets + r * local, local * sizeof(int));
            }
        }
        for (int r = 0; r < world; r++) loader_free(&ranks[r]);
    }
    for (int i = 0; i < B * T; i++) ck_assert_int_eq(one.targets[i], (one.inputs[i] + 1) % 97);
    loader_free(&one);
    unlink(shard_path);
}
END_TEST

// A batch of B x T needs B*T + 1 tokens from its start (the last target). The
// loader wraps to the start of the shard only when the next batch does not fit:
// with exactly k*B*T + 1 tokens, k batches are read before the first wrap; with
// one token fewer, k - 1.
START_TEST(test_loader_wraps_only_when_the_batch_does_not_fit) {
    int B = 2, T = 5, k = 3;
    for (int missing = 0; missing <= 1; missing++) {
        write_counting_shard((size_t)k * B * T + 1 - missing);  // token i is i % 97: inputs[0] is the position
        DataLoader l;
        loader_init(&l, shard_path, 97, B, T, 0, 1);
        int fitting = k - missing;
        for (int batch = 0; batch < 2 * k; batch++) {
            loader_next_batch(&l);
            int want = (batch % fitting) * B * T;
            ck_assert_msg(l.inputs[0] == want, "%zu tokens: batch %d starts at token %d, expected %d", l.num_tokens,
                          batch, l.inputs[0], want);
            ck_assert_int_eq(l.targets[B * T - 1], want + B * T);
        }
        loader_free(&l);
        unlink(shard_path);
    }
}
END_TEST

START_TEST(test_token_id_not_below_vocab_is_rejected) {
    write_counting_shard(100);  // ids up to 96
    uint16_t *tokens;
    token_shard_read(shard_path, 50, &tokens);
}
END_TEST

START_TEST(test_truncated_shard_is_rejected) {
    write_counting_shard(100);
    ck_assert_int_eq(truncate(shard_path, 1024 + 150), 0);
    uint16_t *tokens;
    token_shard_read(shard_path, 97, &tokens);
}
END_TEST

START_TEST(test_wrong_magic_is_rejected) {
    write_counting_shard(100);
    FILE *f = fopen(shard_path, "r+b");
    int32_t bad = 12345;
    fwrite(&bad, sizeof bad, 1, f);
    fclose(f);
    uint16_t *tokens;
    token_shard_read(shard_path, 97, &tokens);
}
END_TEST

START_TEST(test_batch_not_divisible_by_ranks_is_rejected) {
    write_counting_shard(500);
    DataLoader l;
    loader_init(&l, shard_path, 97, 5, 4, 0, 2);
}
END_TEST

START_TEST(test_missing_file_is_rejected) {
    uint16_t *tokens;
    token_shard_read("/nonexistent/train.bin", 97, &tokens);
}
END_TEST

START_TEST(test_mt19937_reference_outputs) {
    // init_genrand(5489) is C++'s default std::mt19937: its first output and its
    // 10000th (which the C++ standard fixes) pin the recurrence and the tempering
    Mt19937 mt;
    mt19937_seed(&mt, 5489);
    ck_assert_uint_eq(mt19937_next(&mt), 3499211612u);
    for (int i = 2; i < 10000; i++) mt19937_next(&mt);
    ck_assert_uint_eq(mt19937_next(&mt), 4123659995u);
}
END_TEST

START_TEST(test_llmc_shuffle_is_a_permutation) {
    Mt19937 mt;
    mt19937_seed(&mt, 42);
    int data[37], seen[37] = {0}, moved = 0;
    for (int i = 0; i < 37; i++) data[i] = i;
    mt19937_shuffle(&mt, data, 37);
    for (int i = 0; i < 37; i++) {
        seen[data[i]]++;
        moved += data[i] != i;
    }
    for (int i = 0; i < 37; i++) ck_assert_int_eq(seen[i], 1);
    ck_assert_int_gt(moved, 20);
}
END_TEST

int main(void) {
    Suite *s = suite_create("data");
    TCase *tc = tcase_create("shards and loader");
    tcase_add_test(tc, test_shard_round_trip);
    tcase_add_test(tc, test_ranks_split_the_global_batch);
    tcase_add_test(tc, test_loader_wraps_only_when_the_batch_does_not_fit);
    tcase_add_test(tc, test_mt19937_reference_outputs);
    tcase_add_test(tc, test_llmc_shuffle_is_a_permutation);
    tcase_add_exit_test(tc, test_token_id_not_below_vocab_is_rejected, 1);
    tcase_add_exit_test(tc, test_truncated_shard_is_rejected, 1);
    tcase_add_exit_test(tc, test_wrong_magic_is_rejected, 1);
    tcase_add_exit_test(tc, test_batch_not_divisible_by_ranks_is_rejected, 1);
    tcase_add_exit_test(tc, test_missing_file_is_rejected, 1);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
