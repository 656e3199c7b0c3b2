// llm.c checkpoints and debug states: bit-exact round trips, partial reads, and
// clear failures on bad files.
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/gpt2_io.h"
#include "tests/check_main.h"
#include "tests/scratch_file.h"

static GPT2Config odd_config(void) {
    GPT2Config c = {.max_seq_len = 13, .vocab_size = 101, .padded_vocab_size = 128, .num_layers = 3,
                    .num_heads = 3, .channels = 12};
    return c;
}

static const char *path;  // this test process's scratch file

static void write_model(GPT2Layout *layout, float **flat) {
    path = scratch_file("io");
    gpt2_layout_init(layout, odd_config());
    *flat = malloc(layout->num_params * sizeof(float));
    for (size_t i = 0; i < layout->num_params; i++) (*flat)[i] = (float)i * 1.25e-3f - 7.0f;
    gpt2_checkpoint_write(path, &layout->config, *flat, layout->num_params);
}

START_TEST(test_checkpoint_round_trip_is_bit_exact) {
    GPT2Layout layout;
    float *flat;
    write_model(&layout, &flat);
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
    ck_assert_mem_eq(&c, &layout.config, sizeof c);
    float *back = malloc(layout.num_params * sizeof(float));
    for (int t = 0; t < layout.num_tensors; t++)
        gpt2_checkpoint_read_rows(path, &layout, t, 0, layout.tensors[t].rows, back + layout.tensors[t].offset);
    ck_assert_mem_eq(back, flat, layout.num_params * sizeof(float));
    // a slice of rows is exactly those rows
    int t = gpt2_tensor_id(&layout, GPT2_FCW, 1);
    float rows[2 * 12];
    gpt2_checkpoint_read_rows(path, &layout, t, 5, 2, rows);
    ck_assert_mem_eq(rows, flat + layout.tensors[t].offset + 5 * 12, sizeof rows);
    free(back);
    free(flat);
    gpt2_layout_free(&layout);
    unlink(path);
}
END_TEST

START_TEST(test_debug_state_round_trip) {
    GPT2Layout layout;
    float *flat;
    write_model(&layout, &flat);
    GPT2DebugState s = {.B = 2, .T = 3, .loss = 4.5f};
    s.inputs = calloc(6, sizeof(int));
    s.targets = calloc(6, sizeof(int));
    for (int i = 0; i < 6; i++) { s.inputs[i] = i * 11; s.targets[i] = 100 - i; }
    s.logits = calloc(6 * 101, sizeof(float));
    for (int i = 0; i < 6 * 101; i++) s.logits[i] = (float)i / 7.0f;
    s.grads = flat;
    gpt2_debug_state_write(path, &layout, &s);
    GPT2DebugState back;
    gpt2_debug_state_read(path, &layout, &back);
    ck_assert_int_eq(back.B, 2);
    ck_assert_int_eq(back.T, 3);
    ck_assert_float_eq(back.loss, 4.5f);
    ck_assert_mem_eq(back.inputs, s.inputs, 6 * sizeof(int));
    ck_assert_mem_eq(back.targets, s.targets, 6 * sizeof(int));
    ck_assert_mem_eq(back.logits, s.logits, 6 * 101 * sizeof(float));
    ck_assert_mem_eq(back.grads, flat, layout.num_params * sizeof(float));
    gpt2_debug_state_free(&back);
    free(s.inputs); free(s.targets); free(s.logits); free(flat);
    gpt2_layout_free(&layout);
    unlink(path);
}
END_TEST

static void corrupt_int(long offset, int32_t value) {
    FILE *f = fopen(path, "r+b");
    fseek(f, offset, SEEK_SET);
    fwrite(&value, sizeof value, 1, f);
    fclose(f);
}

// The file size a header implies is computed from the config alone; it must be
// what the layout counts.
START_TEST(test_config_size_matches_layout) {
    GPT2Config configs[3] = {odd_config(), {.max_seq_len = 37, .vocab_size = 101, .padded_vocab_size = 128,
                                            .num_layers = 2, .num_heads = 2, .channels = 38}};
    ck_assert_int_eq(gpt2_config_preset("d12", 0, &configs[2]), 0);
    for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
        GPT2Layout layout;
        gpt2_layout_init(&layout, configs[k]);
        ck_assert_uint_eq(gpt2_config_num_params(&configs[k]), layout.num_params);
        gpt2_layout_free(&layout);
    }
}
END_TEST

START_TEST(test_wrong_magic) {
    GPT2Layout layout; float *flat;
    write_model(&layout, &flat);
    corrupt_int(0, 20240520);
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
}
END_TEST

START_TEST(test_wrong_version) {
    GPT2Layout layout; float *flat;
    write_model(&layout, &flat);
    corrupt_int(4, 5);  // llm.c's bf16 version
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
}
END_TEST

START_TEST(test_truncated) {
    GPT2Layout layout; float *flat;
    write_model(&layout, &flat);
    ck_assert_int_eq(truncate(path, 4000), 0);
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
}
END_TEST

START_TEST(test_header_size_mismatch) {
    GPT2Layout layout; float *flat;
    write_model(&layout, &flat);
    corrupt_int(6 * 4, 24);  // channels 12 -> 24: the file is now too short
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
}
END_TEST

START_TEST(test_inconsistent_config) {
    GPT2Layout layout; float *flat;
    write_model(&layout, &flat);
    corrupt_int(5 * 4, 5);  // 12 channels do not split into 5 heads
    GPT2Config c;
    gpt2_checkpoint_read_config(path, &c);
}
END_TEST

int main(void) {
    Suite *s = suite_create("io");
    TCase *tc = tcase_create("llm.c files");
    tcase_add_test(tc, test_checkpoint_round_trip_is_bit_exact);
    tcase_add_test(tc, test_debug_state_round_trip);
    tcase_add_test(tc, test_config_size_matches_layout);
    tcase_add_exit_test(tc, test_wrong_magic, 1);
    tcase_add_exit_test(tc, test_wrong_version, 1);
    tcase_add_exit_test(tc, test_truncated, 1);
    tcase_add_exit_test(tc, test_header_size_mismatch, 1);
    tcase_add_exit_test(tc, test_inconsistent_config, 1);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
